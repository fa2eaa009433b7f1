//go:build race

package cache_test

// raceEnabled is true under -race, where sync.Pool deliberately drops items
// and allocation counts are meaningless.
const raceEnabled = true
