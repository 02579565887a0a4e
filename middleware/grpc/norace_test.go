//go:build !race

package sluicegrpc

const raceEnabled = false
