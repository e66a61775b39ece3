package core_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// BenchmarkItemValidate is the check both stores make on every item of a
// take.
func BenchmarkItemValidate(b *testing.B) {
	for _, alg := range []core.Algorithm{core.FixedWindow, core.SlidingWindow, core.TokenBucket} {
		it := core.Item{Budget: "b", Key: "k", Cost: 1,
			Limit: core.Limit{Algorithm: alg, Quota: 100, Window: time.Minute, Burst: 10}}
		b.Run(alg.String(), func(b *testing.B) {
			for b.Loop() {
				if err := it.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
