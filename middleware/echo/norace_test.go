//go:build !race

package sluiceecho

const raceEnabled = false
