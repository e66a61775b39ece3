//go:build !race

package memstore_test

// raceEnabled is true under the race detector, which makes every atomic
// operation and lock many times slower: the flood tests flood less.
const raceEnabled = false
