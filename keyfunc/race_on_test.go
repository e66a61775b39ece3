//go:build race

package keyfunc

// raceEnabled is true under the race detector, which changes allocation
// counts (sync.Pool drops items at random).
const raceEnabled = true
