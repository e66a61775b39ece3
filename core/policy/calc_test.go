package policy

import (
	"testing"
	"time"
)

func TestCalculate(t *testing.T) {
	for _, tc := range []struct {
		quota            int64
		window           time.Duration
		spacing          time.Duration
		perSecond        float64
		burst, burstHigh int64
		retry, retryWin  time.Duration
	}{
		{300, time.Minute, 200 * time.Millisecond, 5, 50, 100, time.Second, time.Minute},
		{1000, time.Minute, 60 * time.Millisecond, 1000.0 / 60, 167, 334, time.Second, time.Minute},
		{20, time.Minute, 3 * time.Second, 1.0 / 3, 4, 7, 3 * time.Second, time.Minute},
		{5, time.Minute, 12 * time.Second, 5.0 / 60, 1, 2, 12 * time.Second, time.Minute},
		{7, time.Minute, 8_571_429 * time.Microsecond, 7.0 / 60, 2, 3, 9 * time.Second, time.Minute},
		{100, time.Second, 10 * time.Millisecond, 100, 100, 100, time.Second, time.Second},
		{1000, time.Hour, 3600 * time.Millisecond, 1000.0 / 3600, 3, 6, 4 * time.Second, time.Hour},
		{1, 500 * time.Millisecond, 500 * time.Millisecond, 2, 1, 1, time.Second, time.Second},
		{3, time.Microsecond * 3, time.Microsecond, 1e6, 3, 3, time.Second, time.Second},
	} {
		l, err := Calculate(tc.quota, tc.window)
		if err != nil {
			t.Errorf("%d/%v: %v", tc.quota, tc.window, err)
			continue
		}
		if l.Spacing != tc.spacing || l.Burst != tc.burst || l.BurstHigh != tc.burstHigh ||
			l.RetryAfter != tc.retry || l.RetryAfterWindow != tc.retryWin || l.FixedWindowPeak != 2*tc.quota {
			t.Errorf("%d/%v = %+v", tc.quota, tc.window, l)
		}
		if d := l.PerSecond - tc.perSecond; d > 1e-9 || d < -1e-9 {
			t.Errorf("%d/%v: %v per second, want %v", tc.quota, tc.window, l.PerSecond, tc.perSecond)
		}
		// A client pacing at Spacing never sends more than the quota in
		// any window: ceil(window/spacing) <= quota.
		if n := (int64(tc.window) + int64(l.Spacing) - 1) / int64(l.Spacing); n > tc.quota {
			t.Errorf("%d/%v: pacing at %v allows %d per window", tc.quota, tc.window, l.Spacing, n)
		}
	}
	for _, bad := range []struct {
		q int64
		w time.Duration
	}{{0, time.Minute}, {-1, time.Minute}, {1, 0}, {1, -time.Second}, {1, time.Nanosecond}, {5, 4 * time.Microsecond}, {1_000_000_000_000_000, 10000 * time.Hour}} {
		if _, err := Calculate(bad.q, bad.w); err == nil {
			t.Errorf("Calculate(%d, %v) accepted", bad.q, bad.w)
		}
	}
}
