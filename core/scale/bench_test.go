package scale_test

import (
	"testing"

	"github.com/quotagate/quotagate/core/scale"
)

// BenchmarkScale measures Scale, which every request of a scaled budget
// calls: between updates, a clock read and two atomic loads.
func BenchmarkScale(b *testing.B) {
	c := scale.MustNew(scale.Config{Signal: func() float64 { return 0.5 }, Target: 0.7})
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = c.Scale()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = c.Scale()
			}
		})
	})
}
