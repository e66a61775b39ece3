package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/redis/go-redis/v9"
)

// logFields is how many fields a sliding log hash holds besides its
// entries: t, s, l and h.
const logFields = 4

// Many charge-and-refund cycles on one sliding log key: each refund removes
// the entry its charge added, so the hash holds only the charges that were
// kept, and both stores agree on every outcome.
func TestRefundSlidingLogStaysBounded(t *testing.T) {
	_, client := startServer(t)
	ctx := context.Background()
	clock := newFakeClock(t0)
	mem := memstore.MustNew(memstore.Config{Clock: clock, SweepInterval: -1})
	defer mem.Close()
	useFakeTime(t, client, clock, 0)
	red := mustStore(t, client, Config{Prefix: "bounded:"})
	l := slidingLog(3, time.Hour)
	one := []core.Item{item("b", "k", l, 1, false)}
	key := red.LogKey("b", "k")

	both := func(what string, items []core.Item) (core.Outcome, core.Outcome) {
		t.Helper()
		var mo, ro [1]core.Outcome
		if err := mem.Take(ctx, items, mo[:]); err != nil {
			t.Fatal(err)
		}
		if err := red.Take(ctx, items, ro[:]); err != nil {
			t.Fatal(err)
		}
		if mo[0] != ro[0] {
			t.Fatalf("%s: stores differ:\n mem %+v\n red %+v", what, mo[0], ro[0])
		}
		return mo[0], ro[0]
	}
	refund := func(items []core.Item, mo, ro core.Outcome) {
		t.Helper()
		if err := mem.Refund(ctx, items, []core.Outcome{mo}); err != nil {
			t.Fatal(err)
		}
		if err := red.Refund(ctx, items, []core.Outcome{ro}); err != nil {
			t.Fatal(err)
		}
	}

	if mo, _ := both("kept charge", one); !mo.Charged {
		t.Fatalf("kept charge: %+v", mo)
	}
	cycles := 3000
	if testing.Short() {
		cycles = 500
	}
	for i := 0; i < cycles; i++ {
		clock.add(1000)
		mo, ro := both(fmt.Sprintf("cycle %d", i), one)
		if !mo.Charged {
			t.Fatalf("cycle %d: %+v", i, mo)
		}
		refund(one, mo, ro)
		if i%500 == 0 {
			if n := client.HLen(ctx, key).Val(); n != logFields+1 {
				t.Fatalf("cycle %d: the log's hash has %d fields, want %d", i, n, logFields+1)
			}
		}
	}
	if n := client.HLen(ctx, key).Val(); n != logFields+1 {
		t.Fatalf("after %d cycles the log's hash has %d fields, want %d", cycles, n, logFields+1)
	}
	// A denial reports the reset of the kept entry, the only one.
	clock.add(time.Second.Microseconds())
	two := []core.Item{item("b", "k", l, 3, false)}
	mo, _ := both("denial", two)
	elapsed := time.Duration(clock.micros()-t0) * time.Microsecond
	if mo.Allowed || mo.Remaining != 2 || mo.Reset != time.Hour-elapsed || mo.RetryAfter != time.Hour-elapsed {
		t.Fatalf("denial after the cycles: %+v", mo)
	}
	// The key's TTL, set by the last refund (at t0 + cycles ms), follows
	// the kept entry, not the refunded ones.
	if ttl, want := client.PTTL(ctx, key).Val(), time.Hour-time.Duration(cycles)*time.Millisecond; ttl <= 0 || ttl > want {
		t.Fatalf("TTL %v, want at most %v", ttl, want)
	}
	// Refunding the kept charge empties the log: the key goes.
	refund(one, core.Outcome{Charged: true, Stamp: t0}, core.Outcome{Charged: true, Stamp: t0})
	if n := client.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("empty log still stored")
	}
	if mo, _ := both("after emptying", two); !mo.Allowed || mo.Remaining != 0 {
		t.Fatalf("full quota after the last refund: %+v", mo)
	}
}

// Refunds of any earlier take, long after it or at once, keep the two
// stores in agreement for every algorithm, and a sliding log never holds
// more entries than the units in its window.
func TestRefundLongAfterDifferential(t *testing.T) {
	_, client := startServer(t)
	limits := []core.Limit{
		fixed(3, time.Second),
		sliding(3, time.Second),
		slidingLog(3, time.Second),
		slidingLog(4, 50*time.Millisecond),
		token(3, time.Second, 3),
		leaky(3, time.Second, 2, 300*time.Millisecond),
	}
	ops := 4000
	if testing.Short() {
		ops = 800
	}
	for i, l := range limits {
		t.Run(fmt.Sprintf("%d_%s", i, l.Algorithm), func(t *testing.T) {
			for seed := uint64(1); seed <= 3; seed++ {
				runRefundDifferential(t, client, l, seed, ops)
			}
		})
	}
}

func runRefundDifferential(t *testing.T, client redis.UniversalClient, l core.Limit, seed uint64, ops int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 99))
	clock := newFakeClock(t0 + rng.Int64N(1_000_000_000))
	mem := memstore.MustNew(memstore.Config{Clock: clock, SweepInterval: -1})
	defer mem.Close()
	prefix := fmt.Sprintf("late:%s:%d:", t.Name(), seed)
	useFakeTime(t, client, clock, 10*time.Minute) // the fake clock stands still while real time passes
	red := mustStore(t, client, Config{Prefix: prefix})
	w := l.Window.Microseconds()
	type charge struct {
		items    []core.Item
		mem, red []core.Outcome
	}
	var history []charge
	var refunds, late, denied int
	for op := 0; op < ops; op++ {
		switch r := rng.IntN(100); {
		case r < 30 && len(history) > 0: // refund any earlier charge
			j := rng.IntN(len(history))
			h := history[j]
			history = append(history[:j], history[j+1:]...) // each charge is refunded once
			if err := mem.Refund(ctx, h.items, h.mem); err != nil {
				t.Fatal(err)
			}
			if err := red.Refund(ctx, h.items, h.red); err != nil {
				t.Fatal(err)
			}
			refunds++
			if clock.micros()-h.mem[0].Stamp > w/2 {
				late++
			}
		case r < 55: // advance: nothing, a little, or up to three windows
			switch rng.IntN(4) {
			case 0:
			case 1:
				clock.add(rng.Int64N(1000))
			case 2:
				clock.add(rng.Int64N(w / 2))
			default:
				clock.add(rng.Int64N(3 * w))
			}
		default: // take
			items := []core.Item{item("b", "k", l, 1+rng.Int64N(2), false)}
			mo, ro := make([]core.Outcome, 1), make([]core.Outcome, 1)
			if err := mem.Take(ctx, items, mo); err != nil {
				t.Fatal(err)
			}
			if err := red.Take(ctx, items, ro); err != nil {
				t.Fatal(err)
			}
			if mo[0] != ro[0] {
				t.Fatalf("seed %d op %d at t0+%dµs: stores differ:\n mem %+v\n red %+v", seed, op, clock.micros()-t0, mo[0], ro[0])
			}
			if mo[0].Charged {
				history = append(history, charge{items, mo, ro})
			} else {
				denied++
			}
			if l.Algorithm == core.SlidingLog {
				// Right after a take the log holds only entries in the
				// window, each of at least one unit.
				if n := client.HLen(ctx, red.LogKey("b", "k")).Val(); n > logFields+l.Quota {
					t.Fatalf("seed %d op %d: the log's hash has %d fields, more than %d", seed, op, n, logFields+l.Quota)
				}
			}
		}
	}
	t.Logf("seed %d: %d refunds (%d more than half a window late), %d denials", seed, refunds, late, denied)
	if refunds == 0 || late == 0 || denied == 0 {
		t.Fatalf("seed %d did not exercise late refunds and denials", seed)
	}
	assertTTLs(t, client, prefix)
}

// A refund gives back only the part of a bucket charge not yet drained
// (core's refund), in both stores: burst 2; A is charged; the bucket
// refills; B and C are charged; refunding A frees nothing.
func TestRefundScriptBucketDrained(t *testing.T) {
	_, client := startServer(t)
	ctx := context.Background()
	for _, l := range []core.Limit{token(1, time.Second, 2), leaky(1, time.Second, 2, 0)} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			clock := newFakeClock(t0)
			useFakeTime(t, client, clock, 0)
			red := mustStore(t, client, Config{Prefix: "drained:" + l.Algorithm.String() + ":"})
			mem := memstore.MustNew(memstore.Config{Clock: clock, SweepInterval: -1})
			defer mem.Close()
			items := []core.Item{item("b", "k", l, 1, false)}
			take := func(what string) core.Outcome {
				t.Helper()
				var o, m [1]core.Outcome
				if err := red.Take(ctx, items, o[:]); err != nil {
					t.Fatal(err)
				}
				if err := mem.Take(ctx, items, m[:]); err != nil {
					t.Fatal(err)
				}
				if o != m {
					t.Fatalf("%s: stores differ:\n mem %+v\n red %+v", what, m[0], o[0])
				}
				return o[0]
			}
			refund := func(o core.Outcome) {
				t.Helper()
				if err := red.Refund(ctx, items, []core.Outcome{o}); err != nil {
					t.Fatal(err)
				}
				if err := mem.Refund(ctx, items, []core.Outcome{o}); err != nil {
					t.Fatal(err)
				}
			}
			a := take("A")
			clock.add(2 * time.Second.Microseconds()) // A has drained: full again
			b, c := take("B"), take("C")
			if !a.Charged || !b.Charged || !c.Charged || c.Remaining != 0 {
				t.Fatalf("charges: A %+v B %+v C %+v", a, b, c)
			}
			refund(a)
			if o := take("after refunding A"); o.Allowed || o.Remaining != 0 || o.RetryAfter != time.Second {
				t.Fatalf("refunding a drained charge freed a token: %+v", o)
			}
			// Half a second on, half of B's charge (its TAT is t0+3s) has
			// drained: refunding B gives back the other half.
			clock.add(500_000)
			refund(b)
			d := take("after refunding half of B")
			if !d.Allowed || d.Remaining != 0 || d.Reset != 2*time.Second {
				t.Fatalf("after refunding half of B: %+v (a whole T given back makes Reset 1.5s)", d)
			}
			// Refunding D at once gives back its whole T; C's charge (TAT
			// t0+4s) has not started draining, so refunding it does too: of
			// A, B, C and D nothing is left charged, the bucket is full.
			refund(d)
			refund(c)
			items[0].Cost = 0
			if o := take("state"); !o.Allowed || o.Remaining != 2 || o.Reset != 0 {
				t.Fatalf("after refunding D and C: %+v", o)
			}
		})
	}
}
