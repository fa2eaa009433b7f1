//go:build !race

package authz_test

const raceEnabled = false
