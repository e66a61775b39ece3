package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// An outer sliding log layer in front of an inner layer that denies: every
// denial refunds the outer charge, and the refunded entries leave the log,
// so a later denial's Reset is measured from the newest entry still held.
func TestSlidingLogRefundLeavesNoEntry(t *testing.T) {
	c := newFakeClock(t0)
	e, s := newEngine(t, c,
		core.Budget{Name: "outer", Algorithm: core.SlidingLog, Quota: 5, Window: time.Minute, Key: remoteAddrKey},
		core.Budget{Name: "inner", Quota: 1, Window: time.Hour, Key: remoteAddrKey},
	)
	outer, inner := e.MustLayer(core.Use("outer")), e.MustLayer(core.Use("inner"))
	outer2 := e.MustLayer(core.Use("outer"), core.Cost(2))
	r := request("GET", "1.2.3.4")
	var d core.Decision
	for i := 0; i < 4; i++ { // 4 of the outer's 5 units spent at t0; inner spent
		d.Reset()
		outer.Decide(r, &d)
		if i == 0 {
			inner.Decide(r, &d)
		}
		if !d.Allowed {
			t.Fatalf("request %d at t0 denied: %+v", i, d)
		}
	}
	c.Advance(time.Second)
	const cycles = 100_000
	for i := 0; i < cycles; i++ {
		c.Advance(time.Microsecond)
		d.Reset()
		outer.Decide(r, &d)
		if !d.Allowed {
			t.Fatalf("cycle %d: outer denied: %+v", i, d)
		}
		inner.Decide(r, &d)
		if d.Allowed || d.DeniedBy != "inner" || !result(t, &d, "outer").Refunded {
			t.Fatalf("cycle %d: inner did not deny and refund: %+v", i, d)
		}
	}
	c.Set(t0.Add(30 * time.Second))
	d.Reset()
	outer2.Decide(r, &d)
	o := result(t, &d, "outer")
	// The only entries left are the four at t0: the window's newest entry
	// leaves at t0+1m, 30 s from now (not 31.1 s, as the refunded entries
	// at t0+1s.. would make it).
	if d.Allowed || o.Remaining != 1 || o.Reset != 30*time.Second || o.RetryAfter != 30*time.Second {
		t.Fatalf("cost 2 after %d refunded cycles: allowed %v, outer %+v", cycles, d.Allowed, o.Outcome)
	}
	if n := s.Len(); n != 2 {
		t.Fatalf("store holds %d keys, want 2", n)
	}
}

// Refunding a sliding log charge in the middle of the log keeps the older
// and newer entries in order: the oldest still decides RetryAfter, the
// newest Reset.
func TestSlidingLogRefundMiddleEntry(t *testing.T) {
	c := newFakeClock(t0)
	s := newStore(t, c)
	l := core.Limit{Algorithm: core.SlidingLog, Quota: 3, Window: time.Minute}
	item := []core.Item{{Budget: "b", Key: "k", Limit: l, Cost: 1}}
	var outs [3]core.Outcome
	for i := range outs {
		if err := s.Take(context.Background(), item, outs[i:i+1]); err != nil || !outs[i].Allowed {
			t.Fatalf("take %d: %+v %v", i, outs[i], err)
		}
		c.Advance(10 * time.Second)
	}
	// Entries at t0, t0+10s, t0+20s; now t0+30s. Refund the middle one.
	if err := s.Refund(context.Background(), item, outs[1:2]); err != nil {
		t.Fatal(err)
	}
	o := take(t, s, l, "k", 2)
	if o.Allowed || o.Remaining != 1 || o.Reset != 50*time.Second || o.RetryAfter != 30*time.Second {
		t.Fatalf("cost 2 after refunding the middle entry: %+v", o)
	}
	// Refund the newest: Reset now follows the oldest, the only one left.
	if err := s.Refund(context.Background(), item, outs[2:3]); err != nil {
		t.Fatal(err)
	}
	o = take(t, s, l, "k", 3)
	if o.Allowed || o.Remaining != 2 || o.Reset != 30*time.Second || o.RetryAfter != 30*time.Second {
		t.Fatalf("cost 3 after refunding the newest entry: %+v", o)
	}
	// A refund after the entry left the window does nothing.
	c.Advance(31 * time.Second)
	if err := s.Refund(context.Background(), item, outs[0:1]); err != nil {
		t.Fatal(err)
	}
	if o := take(t, s, l, "k", 3); !o.Allowed || o.Remaining != 0 || o.Reset != time.Minute {
		t.Fatalf("full quota after the window: %+v", o)
	}
}

// A bucket refund gives back only what of the charge has not drained:
// burst 2; A is charged; the bucket refills; B and C are charged; refunding
// A frees nothing, while refunding C at once frees its token.
func TestBucketRefundAfterDrain(t *testing.T) {
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		c := newFakeClock(t0)
		s := newStore(t, c)
		l := core.Limit{Algorithm: alg, Quota: 1, Window: time.Second, Burst: 2}
		item := []core.Item{{Budget: "b", Key: "k", Limit: l, Cost: 1}}
		a := take(t, s, l, "k", 1)
		c.Advance(2 * time.Second)
		take(t, s, l, "k", 1)
		cc := take(t, s, l, "k", 1)
		if !a.Charged || !cc.Charged || cc.Remaining != 0 {
			t.Fatalf("%v: charges A %+v C %+v", alg, a, cc)
		}
		if err := s.Refund(context.Background(), item, []core.Outcome{a}); err != nil {
			t.Fatal(err)
		}
		if o := take(t, s, l, "k", 1); o.Allowed || o.RetryAfter != time.Second {
			t.Fatalf("%v: refunding a drained charge freed a token: %+v", alg, o)
		}
		if err := s.Refund(context.Background(), item, []core.Outcome{cc}); err != nil {
			t.Fatal(err)
		}
		if o := take(t, s, l, "k", 0); o.Remaining != 1 || o.Reset != time.Second {
			t.Fatalf("%v: after refunding C at once: %+v", alg, o)
		}
	}
}
