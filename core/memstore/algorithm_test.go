package memstore_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

func TestFixedWindowBoundaryBurst(t *testing.T) {
	c := newFakeClock(t0.Add(59 * time.Second))
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.FixedWindow, Quota: 10, Window: time.Minute}
	for i := 0; i < 10; i++ {
		o := take(t, s, l, "k", 1)
		if !o.Allowed || o.Remaining != int64(9-i) || o.Reset != time.Second {
			t.Fatalf("request %d in the window's last second: %+v", i, o)
		}
	}
	o := take(t, s, l, "k", 1)
	if o.Allowed || o.Charged || o.RetryAfter != time.Second || o.Remaining != 0 {
		t.Fatalf("11th request: %+v", o)
	}
	// The next window starts at :00 exactly: the quota is available again,
	// so 20 requests pass within two seconds.
	c.Set(t0.Add(time.Minute))
	for i := 0; i < 10; i++ {
		if o := take(t, s, l, "k", 1); !o.Allowed || o.Reset != time.Minute {
			t.Fatalf("request %d of the next window: %+v", i, o)
		}
	}
	if o := take(t, s, l, "k", 1); o.Allowed {
		t.Fatalf("over quota in the next window: %+v", o)
	}
}

func TestFixedWindowAlignedToEpoch(t *testing.T) {
	c := newFakeClock(t0.Add(41*time.Second + 300*time.Millisecond))
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.FixedWindow, Quota: 1, Window: time.Minute}
	take(t, s, l, "k", 1)
	o := take(t, s, l, "k", 1)
	if want := 18*time.Second + 700*time.Millisecond; o.RetryAfter != want || o.Reset != want {
		t.Fatalf("retry after %v, reset %v; want %v", o.RetryAfter, o.Reset, want)
	}
}

func TestSlidingWindowWeighting(t *testing.T) {
	c := newFakeClock(t0.Add(30 * time.Second))
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.SlidingWindow, Quota: 10, Window: time.Minute}
	for i := 0; i < 10; i++ {
		if o := take(t, s, l, "k", 1); !o.Allowed {
			t.Fatalf("request %d: %+v", i, o)
		}
	}
	// 15 s into the next window the previous window (10) still covers 45 of
	// 60 s: weight 7.5, so 2 more fit (7.5+2 <= 10), a third does not.
	c.Set(t0.Add(75 * time.Second))
	for i := 0; i < 2; i++ {
		o := take(t, s, l, "k", 1)
		if !o.Allowed || o.Remaining != int64(1-i) {
			t.Fatalf("weighted request %d: %+v", i, o)
		}
	}
	o := take(t, s, l, "k", 1)
	if o.Allowed {
		t.Fatalf("third request passed: %+v", o)
	}
	// It fits once prev's weight drops to 4.2: 10×rem/60 + 3 <= 10 → rem <= 42 s,
	// i.e. 3 s from now.
	if o.RetryAfter != 3*time.Second {
		t.Fatalf("retry after %v, want 3s", o.RetryAfter)
	}
	// Reset: the current window's 2 weigh until the end of the next window.
	if want := 45*time.Second + time.Minute; o.Reset != want {
		t.Fatalf("reset %v, want %v", o.Reset, want)
	}
	c.Advance(o.RetryAfter - time.Millisecond)
	if o := take(t, s, l, "k", 1); o.Allowed {
		t.Fatal("allowed 1 ms before retry-after")
	}
	c.Advance(time.Millisecond)
	if o := take(t, s, l, "k", 1); !o.Allowed {
		t.Fatalf("denied at retry-after: %+v", o)
	}
}

func TestSlidingWindowRetryIntoNextWindow(t *testing.T) {
	c := newFakeClock(t0.Add(10 * time.Second))
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.SlidingWindow, Quota: 4, Window: time.Minute}
	for i := 0; i < 4; i++ {
		take(t, s, l, "k", 1)
	}
	o := take(t, s, l, "k", 1)
	// prev=0, curr=4: in the next window curr becomes prev; 4×rem/60+1 <= 4
	// → rem <= 45 s, i.e. 15 s into it: 50 s + 15 s from now.
	if o.Allowed || o.RetryAfter != 65*time.Second {
		t.Fatalf("%+v, want retry after 65s", o)
	}
	c.Advance(o.RetryAfter)
	if o := take(t, s, l, "k", 1); !o.Allowed {
		t.Fatalf("denied at retry-after: %+v", o)
	}
}

func TestTokenBucketBurstThenSteady(t *testing.T) {
	c := newFakeClock(t0)
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.TokenBucket, Quota: 10, Window: time.Second, Burst: 5}
	for i := 0; i < 5; i++ {
		o := take(t, s, l, "k", 1)
		if !o.Allowed || o.Remaining != int64(4-i) || o.Reset != time.Duration(i+1)*100*time.Millisecond {
			t.Fatalf("burst request %d: %+v", i, o)
		}
	}
	o := take(t, s, l, "k", 1)
	if o.Allowed || o.RetryAfter != 100*time.Millisecond || o.Reset != 500*time.Millisecond {
		t.Fatalf("after burst: %+v", o)
	}
	// Steady state: one request per 100 ms.
	for i := 0; i < 20; i++ {
		c.Advance(100 * time.Millisecond)
		if o := take(t, s, l, "k", 1); !o.Allowed || o.Remaining != 0 {
			t.Fatalf("steady request %d: %+v", i, o)
		}
		if o := take(t, s, l, "k", 1); o.Allowed {
			t.Fatalf("second request in interval %d passed", i)
		}
	}
	// After a full second idle the bucket is full again.
	c.Advance(time.Second)
	if o := take(t, s, l, "k", 5); !o.Allowed || o.Remaining != 0 {
		t.Fatalf("full bucket: %+v", o)
	}
}

func TestTokenBucketAdmissionBound(t *testing.T) {
	// In any interval of length L, GCRA admits at most B + floor(L/T).
	rng := rand.New(rand.NewPCG(1, 2))
	c := newFakeClock(t0)
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.TokenBucket, Quota: 50, Window: 10 * time.Second, Burst: 7}
	tInt := 200 * time.Millisecond
	var admitted []time.Time
	for i := 0; i < 3000; i++ {
		c.Advance(time.Duration(rng.IntN(150)) * time.Millisecond)
		if o := take(t, s, l, "k", 1); o.Allowed {
			admitted = append(admitted, c.Now())
		}
	}
	for i := range admitted {
		for j := i; j < len(admitted); j++ {
			span := admitted[j].Sub(admitted[i])
			if n := int64(j - i + 1); n > l.Burst+int64(span/tInt) {
				t.Fatalf("%d admitted within %v; bound %d", n, span, l.Burst+int64(span/tInt))
			}
		}
	}
	if len(admitted) < 100 {
		t.Fatalf("only %d admitted", len(admitted))
	}
}

func TestLeakyBucketShaping(t *testing.T) {
	c := newFakeClock(t0)
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.LeakyBucket, Quota: 10, Window: time.Second, Burst: 1, MaxWait: 250 * time.Millisecond}
	for i, want := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond} {
		o := take(t, s, l, "k", 1)
		if !o.Allowed || !o.Charged || o.Delay != want {
			t.Fatalf("request %d: %+v, want delay %v", i, o, want)
		}
	}
	// The fourth slot is 300 ms away, beyond the 250 ms maximum: denied,
	// and it could wait again 50 ms from now.
	o := take(t, s, l, "k", 1)
	if o.Allowed || o.Charged || o.RetryAfter != 50*time.Millisecond {
		t.Fatalf("fourth request: %+v", o)
	}
	c.Advance(50 * time.Millisecond)
	if o := take(t, s, l, "k", 1); !o.Allowed || o.Delay != 250*time.Millisecond {
		t.Fatalf("at retry-after: %+v", o)
	}
}

func TestSlidingLogExact(t *testing.T) {
	c := newFakeClock(t0)
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.SlidingLog, Quota: 3, Window: 10 * time.Second}
	for _, at := range []time.Duration{0, 4 * time.Second, 8 * time.Second} {
		c.Set(t0.Add(at))
		if o := take(t, s, l, "k", 1); !o.Allowed {
			t.Fatalf("at %v: %+v", at, o)
		}
	}
	c.Set(t0.Add(9 * time.Second))
	o := take(t, s, l, "k", 1)
	if o.Allowed || o.RetryAfter != time.Second || o.Reset != 9*time.Second {
		t.Fatalf("at 9s: %+v", o)
	}
	// A cost-2 request must wait for the two oldest entries: until 14 s.
	if o := take(t, s, l, "k", 2); o.Allowed || o.RetryAfter != 5*time.Second {
		t.Fatalf("cost 2 at 9s: %+v", o)
	}
	c.Set(t0.Add(10 * time.Second))
	if o := take(t, s, l, "k", 1); !o.Allowed || o.Remaining != 0 {
		t.Fatalf("at 10s: %+v", o)
	}
	if o := take(t, s, l, "k", 1); o.Allowed {
		t.Fatalf("over quota at 10s: %+v", o)
	}
}

func TestSlidingLogNeverExceedsQuotaInAnyWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	c := newFakeClock(t0)
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.SlidingLog, Quota: 20, Window: 5 * time.Second}
	type adm struct {
		at   time.Time
		cost int64
	}
	var admitted []adm
	for i := 0; i < 2000; i++ {
		c.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
		cost := int64(1 + rng.IntN(3))
		if o := take(t, s, l, "k", cost); o.Allowed {
			admitted = append(admitted, adm{c.Now(), cost})
		}
	}
	for i := range admitted {
		var sum int64
		for j := i; j < len(admitted) && admitted[j].at.Sub(admitted[i].at) < l.Window; j++ {
			sum += admitted[j].cost
		}
		if sum > l.Quota {
			t.Fatalf("%d units within one window from %v", sum, admitted[i].at)
		}
	}
}

func TestRefundPerAlgorithm(t *testing.T) {
	limits := []core.Limit{
		{Algorithm: core.FixedWindow, Quota: 5, Window: time.Minute},
		{Algorithm: core.SlidingWindow, Quota: 5, Window: time.Minute},
		{Algorithm: core.SlidingLog, Quota: 5, Window: time.Minute},
		{Algorithm: core.TokenBucket, Quota: 5, Window: time.Minute, Burst: 5},
		{Algorithm: core.LeakyBucket, Quota: 5, Window: time.Minute, Burst: 5, MaxWait: time.Second},
	}
	for _, l := range limits {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			c := newFakeClock(t0.Add(10 * time.Second))
			s := newStore(t, c)
			item := []core.Item{{Budget: "b", Key: "k", Limit: l, Cost: 3}}
			out := make([]core.Outcome, 1)
			if err := s.Take(context.Background(), item, out); err != nil || !out[0].Charged || out[0].Remaining != 2 {
				t.Fatalf("take: %+v %v", out[0], err)
			}
			c.Advance(time.Second)
			if err := s.Refund(context.Background(), item, out); err != nil {
				t.Fatal(err)
			}
			if o := take(t, s, l, "k", 0); o.Remaining != 5 {
				t.Fatalf("after refund remaining %d, want 5", o.Remaining)
			}
		})
	}
}

func TestChangedAlgorithmResetsState(t *testing.T) {
	c := newFakeClock(t0)
	s := newStore(t, c)
	fixed := core.Limit{Algorithm: core.FixedWindow, Quota: 2, Window: time.Minute}
	take(t, s, fixed, "k", 2)
	bucket := core.Limit{Algorithm: core.TokenBucket, Quota: 2, Window: time.Minute, Burst: 2}
	if o := take(t, s, bucket, "k", 2); !o.Allowed {
		t.Fatalf("state of another algorithm was read: %+v", o)
	}
}

func TestQuotaChangeAppliesAtOnce(t *testing.T) {
	c := newFakeClock(t0)
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.FixedWindow, Quota: 5, Window: time.Minute}
	take(t, s, l, "k", 5)
	l.Quota = 8
	if o := take(t, s, l, "k", 3); !o.Allowed || o.Remaining != 0 {
		t.Fatalf("raised quota: %+v", o)
	}
	l.Quota = 4
	if o := take(t, s, l, "k", 1); o.Allowed || o.Remaining != 0 {
		t.Fatalf("lowered quota: %+v", o)
	}
}
