package core

import (
	"testing"
	"time"
)

// FuzzItemValidate holds Item.Validate's fast path to the rules: it
// accepts an item only when every rule holds, and accepts every fixed
// window and concurrency item for which they do.
func FuzzItemValidate(f *testing.F) {
	const span = int64(maxSpan) * int64(time.Microsecond)
	for _, alg := range []Algorithm{FixedWindow, Concurrency, TokenBucket, SlidingWindow, -1, Concurrency + 1} {
		for _, c := range []struct{ quota, window, cost int64 }{
			{1, int64(time.Millisecond), 1},
			{100, int64(time.Minute), 0},
			{100, int64(time.Minute), 101},
			{100, int64(time.Minute), -1},
			{MaxQuota, span, MaxQuota},
			{MaxQuota + 1, span, 1},
			{MaxConcurrencyQuota, int64(time.Second), 1},
			{MaxConcurrencyQuota + 1, int64(time.Second), 1},
			{1, span + int64(time.Millisecond), 1},
			{1, int64(time.Millisecond) + 1, 1},
			{0, int64(time.Second), 0},
			{1, 0, 0},
			{1, -int64(time.Millisecond), 0},
		} {
			f.Add(int(alg), c.quota, c.window, c.quota, c.cost)
		}
	}
	f.Fuzz(func(t *testing.T, alg int, quota, window, burst, cost int64) {
		it := Item{Budget: "b", Key: "k", Cost: cost, Limit: Limit{
			Algorithm: Algorithm(alg), Quota: quota, Window: time.Duration(window), Burst: burst}}
		l := &it.Limit
		valid := len(l.problems()) == 0 && 0 <= cost && cost <= l.Capacity()
		fast := it.plainlyValid()
		if fast && !valid {
			t.Fatalf("fast path accepts %+v, which breaks a rule: %v", it, it.Validate())
		}
		if valid && !fast && (it.Limit.Algorithm == FixedWindow || it.Limit.Algorithm == Concurrency) {
			t.Fatalf("fast path refuses %+v, which breaks no rule", it)
		}
		if valid != (it.Validate() == nil) {
			t.Fatalf("Validate(%+v) = %v; the rules say valid = %v", it, it.Validate(), valid)
		}
	})
}
