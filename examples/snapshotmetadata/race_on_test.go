//go:build race

package main

// raceEnabled: the race detector multiplies memory several times.
const raceEnabled = true
