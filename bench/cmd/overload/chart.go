package main

func (rep *report) chart(path string) error { return nil }
