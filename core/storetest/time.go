package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/fakeclock"
)

// Time checks, on a store from open, what every algorithm does as time
// passes, to the microsecond. It moves the store's clock itself, forward
// only, across boundaries and idle spells:
//
//   - roll-over: a fixed window spent in one window has its whole quota
//     back exactly at the next boundary, not 1µs before; a sliding window
//     counter regains it gradually (Q·x/W of it x into the next window,
//     in whole milliseconds), and the window before that weighs nothing
//     from the boundary after; a sliding log's units leave it exactly one
//     window after they were taken;
//   - refill: a drained token bucket has exactly k more tokens k emission
//     intervals (ceil(Window/Quota) µs) later, not k+1 and not 1µs
//     sooner; a leaky bucket's queue drains at its rate, and a request
//     waits for its slot only within MaxWait;
//   - expiry: a key spent in full and then left alone, until the moment
//     its state is documented to be empty, for three windows and for a
//     million, is as new: its whole capacity and no more, with a new
//     key's Remaining and Reset; 1µs before that moment it is not;
//   - limit changes at boundaries: a quota raised or lowered just before
//     and just after a boundary (an emission interval for the buckets)
//     applies to the state as it stands, which never embeds the quota
//     (for a token bucket, the spent fraction of its bucket is kept);
//   - concurrency slots, which have no time of their own: a held slot is
//     still held 1µs before its lease (Window) ends, whatever the quota
//     (the memory store never reclaims a slot; the Redis store reclaims
//     it when its lease ends, which the kit does not check).
//
// Every step compares a take's Outcome with the algorithm's definition
// (package core, Algorithm): Allowed, Charged, Remaining, Reset,
// RetryAfter and Delay; Stamp is not compared. algs lists the algorithms
// the store implements, as Config.Algorithms does; none means all six.
//
// The store must take every time it uses from the clock it is given,
// including when state expires: a store that leaves forgetting to its
// backend's TTLs, in real time, fails, since the kit's clock jumps
// windows ahead while little real time passes.
func Time(t *testing.T, open OpenAt, algs ...core.Algorithm) {
	t.Helper()
	if err := VerifyTime(context.Background(), open, algs...); err != nil {
		t.Error(err)
	}
}

// VerifyTime is [Time] for code without a *testing.T: it returns every
// step a store got wrong (the first of each case and of each idle spell),
// joined, or nil.
func VerifyTime(ctx context.Context, open OpenAt, algs ...core.Algorithm) error {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	s, err := open(clock)
	if err != nil {
		return fmt.Errorf("storetest: new store: %w", err)
	}
	if len(algs) == 0 {
		algs = allAlgorithms
	}
	tr := &traveller{ctx: ctx, s: s, clock: clock, last: clock.Now().UnixMicro()}
	var errs []error
	for _, c := range timeCases {
		if slices.Contains(algs, c.limit.Algorithm) {
			if err := tr.run(c); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, l := range expiryLimits {
		if slices.Contains(algs, l.Algorithm) {
			errs = append(errs, tr.expiry(l)...)
		}
	}
	return errors.Join(errs...)
}

// A timeStep is one take of a time case: at a time after the case's start
// (a window boundary, and an emission interval's for a bucket), of cost
// units, under the case's limit with its quota (and burst) replaced when
// q (burst) is set. want is its outcome, Stamp aside; why says what the
// step shows.
type timeStep struct {
	at       time.Duration
	cost     int64
	q, burst int64
	want     core.Outcome
	why      string
}

// A timeCase is a sequence of takes on one new key.
type timeCase struct {
	check string
	limit core.Limit
	steps []timeStep
}

const us = time.Microsecond

func allowed(remaining int64, reset time.Duration) core.Outcome {
	return core.Outcome{Allowed: true, Charged: true, Remaining: remaining, Reset: reset}
}

func delayed(delay time.Duration, remaining int64, reset time.Duration) core.Outcome {
	return core.Outcome{Allowed: true, Charged: true, Remaining: remaining, Reset: reset, Delay: delay}
}

func denied(remaining int64, reset, retry time.Duration) core.Outcome {
	return core.Outcome{Remaining: remaining, Reset: reset, RetryAfter: retry}
}

var (
	fixed1s   = core.Limit{Algorithm: core.FixedWindow, Quota: 5, Window: time.Second}
	fixed7ms  = core.Limit{Algorithm: core.FixedWindow, Quota: 3, Window: 7 * time.Millisecond}
	sliding   = core.Limit{Algorithm: core.SlidingWindow, Quota: 10, Window: time.Second}
	slidLog   = core.Limit{Algorithm: core.SlidingLog, Quota: 3, Window: time.Second}
	token     = core.Limit{Algorithm: core.TokenBucket, Quota: 10, Window: time.Second, Burst: 4}  // T = 100ms
	tokenOdd  = core.Limit{Algorithm: core.TokenBucket, Quota: 3, Window: time.Second, Burst: 3}   // T = 333334µs
	tokenFull = core.Limit{Algorithm: core.TokenBucket, Quota: 10, Window: time.Second, Burst: 10} // T = 100ms
	leaky     = core.Limit{Algorithm: core.LeakyBucket, Quota: 10, Window: time.Second, Burst: 1, MaxWait: 250 * time.Millisecond}
	slots     = core.Limit{Algorithm: core.Concurrency, Quota: 2, Window: time.Second}
)

// timeCases are the roll-over, refill and limit-change cases, each
// outcome worked out from the algorithm's definition (package core,
// Algorithm; the sliding window counter in whole milliseconds).
var timeCases = []timeCase{
	{"roll-over", fixed1s, []timeStep{
		{at: 0, cost: 5, want: allowed(0, time.Second), why: "a new key's quota"},
		{at: 500 * time.Millisecond, cost: 1, want: denied(0, 500*time.Millisecond, 500*time.Millisecond), why: "spent until the window ends"},
		{at: time.Second - us, cost: 1, want: denied(0, us, us), why: "still spent 1µs before the boundary"},
		{at: time.Second, cost: 5, want: allowed(0, time.Second), why: "the whole quota is back at the boundary"},
		{at: 2300 * time.Millisecond, cost: 2, want: allowed(3, 700*time.Millisecond), why: "a window with nothing spent"},
		{at: 3*time.Second - us, cost: 3, want: allowed(0, us), why: "the window's last microsecond"},
		{at: 3*time.Second - us, cost: 1, want: denied(0, us, us), why: "still spent 1µs before the boundary"},
		{at: 3 * time.Second, cost: 1, want: allowed(4, time.Second), why: "the whole quota is back at the boundary"},
	}},
	{"roll-over", fixed7ms, []timeStep{
		{at: 0, cost: 3, want: allowed(0, 7*time.Millisecond), why: "a new key's quota"},
		{at: 7*time.Millisecond - us, cost: 1, want: denied(0, us, us), why: "still spent 1µs before the boundary (windows aligned to multiples of 7ms since the epoch)"},
		{at: 7 * time.Millisecond, cost: 3, want: allowed(0, 7*time.Millisecond), why: "the whole quota is back at the boundary"},
		{at: 10500 * us, cost: 1, want: denied(0, 3500*us, 3500*us), why: "spent until the window ends"},
		{at: 14 * time.Millisecond, cost: 1, want: allowed(2, 7*time.Millisecond), why: "the whole quota is back at the boundary"},
	}},
	{"roll-over", sliding, []timeStep{
		{at: 0, cost: 10, want: allowed(0, 2*time.Second), why: "a new key's quota, counted until two windows on"},
		{at: time.Second - us, cost: 1, want: denied(0, 1001*time.Millisecond, 101*time.Millisecond), why: "still spent 1µs before the boundary (times in whole ms)"},
		{at: time.Second, cost: 1, want: denied(0, time.Second, 100*time.Millisecond), why: "the previous window's 10 weigh in full at the boundary"},
		{at: 1100*time.Millisecond - us, cost: 1, want: denied(0, 901*time.Millisecond, time.Millisecond), why: "the previous window weighs 901/1000 of 10"},
		{at: 1100 * time.Millisecond, cost: 1, want: allowed(0, 1900*time.Millisecond), why: "one unit back a tenth of a window in: Q·x/W"},
		{at: 1500 * time.Millisecond, cost: 4, want: allowed(0, 1500*time.Millisecond), why: "five units back half a window in"},
		{at: 2*time.Second - us, cost: 5, want: denied(4, 1001*time.Millisecond, time.Millisecond), why: "the window before weighs 1/1000 of 10"},
		{at: 2 * time.Second, cost: 5, want: allowed(0, 2*time.Second), why: "at the next boundary the 5 of the window before weigh in full"},
	}},
	{"roll-over", slidLog, []timeStep{
		{at: 0, cost: 1, want: allowed(2, time.Second), why: "a new key's quota"},
		{at: 400 * time.Millisecond, cost: 2, want: allowed(0, time.Second), why: "the rest of the quota"},
		{at: time.Second - us, cost: 1, want: denied(0, 400001*us, us), why: "the unit taken at 0 still counts 1µs before it leaves"},
		{at: time.Second, cost: 1, want: allowed(0, time.Second), why: "the unit taken at 0 leaves exactly one window later"},
		{at: time.Second + us, cost: 1, want: denied(0, 999999*us, 399999*us), why: "the units taken at 400ms still count"},
		{at: 1400*time.Millisecond - us, cost: 2, want: denied(0, 600001*us, us), why: "still counted 1µs before they leave"},
		{at: 1400 * time.Millisecond, cost: 2, want: allowed(0, time.Second), why: "the units taken at 400ms leave exactly one window later"},
	}},
	{"refill", token, []timeStep{
		{at: 0, cost: 4, want: allowed(0, 400*time.Millisecond), why: "a new key's burst"},
		{at: 0, cost: 1, want: denied(0, 400*time.Millisecond, 100*time.Millisecond), why: "drained: the next token in one emission interval"},
		{at: 100*time.Millisecond - us, cost: 1, want: denied(0, 300001*us, us), why: "no token 1µs before the interval ends"},
		{at: 100 * time.Millisecond, cost: 1, want: allowed(0, 400*time.Millisecond), why: "one token after one interval"},
		{at: 400*time.Millisecond - us, cost: 3, want: denied(2, 100001*us, us), why: "two tokens 1µs before the third interval ends"},
		{at: 400 * time.Millisecond, cost: 4, want: denied(3, 100*time.Millisecond, 100*time.Millisecond), why: "three intervals later three tokens, not four"},
		{at: 400 * time.Millisecond, cost: 3, want: allowed(0, 400*time.Millisecond), why: "three intervals later three tokens"},
		{at: 800*time.Millisecond - us, cost: 4, want: denied(3, us, us), why: "not full 1µs before the fourth interval ends"},
		{at: 800 * time.Millisecond, cost: 4, want: allowed(0, 400*time.Millisecond), why: "full again after four intervals"},
	}},
	{"refill", tokenOdd, []timeStep{
		{at: 0, cost: 3, want: allowed(0, 1000002*us), why: "a new key's burst: 3 intervals of ceil(1s/3) = 333334µs"},
		{at: 333333 * us, cost: 1, want: denied(0, 666669*us, us), why: "no token 1µs before the interval ends"},
		{at: 333334 * us, cost: 1, want: allowed(0, 1000002*us), why: "one token after one interval of 333334µs"},
		{at: 1333334 * us, cost: 3, want: denied(2, 2*us, 2*us), why: "a window after the last token, three intervals are 2µs away"},
		{at: 1333336 * us, cost: 3, want: allowed(0, 1000002*us), why: "full again three intervals after the last token"},
	}},
	{"refill", leaky, []timeStep{
		{at: 0, cost: 1, want: allowed(0, 100*time.Millisecond), why: "a new key's burst of one"},
		{at: 0, cost: 1, want: delayed(100*time.Millisecond, 0, 200*time.Millisecond), why: "the next slot, one interval on"},
		{at: 0, cost: 1, want: delayed(200*time.Millisecond, 0, 300*time.Millisecond), why: "the slot two intervals on, within the 250ms wait"},
		{at: 0, cost: 1, want: denied(0, 300*time.Millisecond, 50*time.Millisecond), why: "the slot three intervals on is beyond the wait"},
		{at: 50*time.Millisecond - us, cost: 1, want: denied(0, 250001*us, us), why: "still beyond the wait by 1µs"},
		{at: 50 * time.Millisecond, cost: 1, want: delayed(250*time.Millisecond, 0, 350*time.Millisecond), why: "a wait of exactly MaxWait"},
		{at: 400*time.Millisecond - us, cost: 1, want: delayed(us, 0, 100001*us), why: "the queue drains at its rate: 1µs left"},
		{at: 600 * time.Millisecond, cost: 1, want: allowed(0, 100*time.Millisecond), why: "a drained queue: no wait"},
	}},
	{"lease", slots, []timeStep{
		{at: 0, cost: 2, want: allowed(0, 0), why: "a new key's slots"},
		{at: time.Second - us, cost: 1, want: denied(0, 0, core.ConcurrencyRetryAfter), why: "time shorter than the lease frees no slot"},
	}},
	{"limit change", fixed1s, []timeStep{
		{at: 0, cost: 5, want: allowed(0, time.Second), why: "a new key's quota"},
		{at: time.Second - us, cost: 3, q: 8, want: allowed(0, us), why: "quota raised to 8 just before the boundary: the 5 spent stay spent"},
		{at: time.Second - us, cost: 1, q: 3, want: denied(0, us, us), why: "quota lowered to 3, below the 8 spent"},
		{at: time.Second, cost: 3, q: 3, want: allowed(0, time.Second), why: "at the boundary the new window counts from 0 under the quota of 3"},
		{at: time.Second, cost: 2, q: 5, want: allowed(0, time.Second), why: "quota raised to 5 just after the boundary: the 3 spent stay spent"},
		{at: time.Second + us, cost: 1, q: 2, want: denied(0, time.Second-us, time.Second-us), why: "quota lowered to 2, below the 5 spent: denied until the window ends"},
		{at: 2 * time.Second, cost: 2, q: 2, want: allowed(0, time.Second), why: "the quota of 2 at the next boundary"},
	}},
	{"limit change", sliding, []timeStep{
		{at: 0, cost: 10, want: allowed(0, 2*time.Second), why: "a new key's quota"},
		{at: time.Second - us, cost: 5, q: 15, want: allowed(0, 1001*time.Millisecond), why: "quota raised to 15 just before the boundary: the 10 spent stay spent"},
		{at: time.Second - us, cost: 1, q: 12, want: denied(0, 1001*time.Millisecond, 268*time.Millisecond), why: "quota lowered to 12, below the 15 spent"},
		{at: time.Second, cost: 1, q: 10, want: denied(0, time.Second, 400*time.Millisecond), why: "at the boundary the previous window's 15 weigh in full against a quota of 10"},
		{at: time.Second, cost: 15, q: 30, want: allowed(0, 2*time.Second), why: "quota raised to 30 just after the boundary: 15 weighed, 15 more"},
		{at: 1500 * time.Millisecond, cost: 1, q: 20, want: denied(0, 1500*time.Millisecond, 234*time.Millisecond), why: "quota lowered to 20: 15×0.5 + 15 spent"},
		{at: 2 * time.Second, cost: 5, q: 20, want: allowed(0, 2*time.Second), why: "at the next boundary the window before weighs 15 in full"},
	}},
	{"limit change", slidLog, []timeStep{
		{at: 0, cost: 3, want: allowed(0, time.Second), why: "a new key's quota"},
		{at: time.Second - us, cost: 2, q: 5, want: allowed(0, time.Second), why: "quota raised to 5 just before the units taken at 0 leave"},
		{at: time.Second - us, cost: 1, q: 4, want: denied(0, time.Second, us), why: "quota lowered to 4, below the 5 in the log"},
		{at: time.Second, cost: 1, q: 4, want: allowed(1, time.Second), why: "the units taken at 0 leave: 2 in the log, under a quota of 4"},
		{at: time.Second, cost: 1, q: 2, want: denied(0, time.Second, time.Second-us), why: "quota lowered to 2, below the 3 in the log"},
		{at: 2*time.Second - us, cost: 1, q: 2, want: allowed(0, time.Second), why: "the units taken 1µs before the first boundary leave"},
	}},
	{"limit change", tokenFull, []timeStep{
		{at: 0, cost: 10, want: allowed(0, time.Second), why: "a new key's burst"},
		{at: 500 * time.Millisecond, cost: 10, q: 20, burst: 20, want: allowed(0, time.Second), why: "quota and burst doubled half way: half the bucket is spent, 10 of 20"},
		{at: 500 * time.Millisecond, cost: 1, q: 20, burst: 20, want: denied(0, time.Second, 50*time.Millisecond), why: "not 11 of 20"},
		{at: 500 * time.Millisecond, cost: 1, q: 5, burst: 5, want: denied(0, time.Second, 200*time.Millisecond), why: "quota and burst lowered to 5: a token every 200ms"},
		{at: 700*time.Millisecond - us, cost: 1, q: 5, burst: 5, want: denied(0, 800001*us, us), why: "no token 1µs before the 200ms interval ends"},
		{at: 700 * time.Millisecond, cost: 1, q: 5, burst: 5, want: allowed(0, time.Second), why: "one token at the end of the 200ms interval"},
		{at: 800 * time.Millisecond, cost: 3, q: 20, burst: 20, want: denied(2, 900*time.Millisecond, 50*time.Millisecond), why: "raised to 20 again: 100ms is two tokens of 50ms, not three"},
		{at: 800 * time.Millisecond, cost: 2, q: 20, burst: 20, want: allowed(0, time.Second), why: "two tokens of 50ms"},
	}},
	{"limit change", leaky, []timeStep{
		{at: 0, cost: 1, want: allowed(0, 100*time.Millisecond), why: "a new key's burst of one"},
		{at: 0, cost: 1, want: delayed(100*time.Millisecond, 0, 200*time.Millisecond), why: "the next slot, one interval on"},
		{at: 0, cost: 1, q: 5, want: delayed(200*time.Millisecond, 0, 400*time.Millisecond), why: "quota lowered to 5: the next slot is 200ms on"},
		{at: 0, cost: 1, q: 20, want: denied(0, 400*time.Millisecond, 150*time.Millisecond), why: "quota raised to 20: the queue already reaches 400ms, beyond the wait"},
		{at: 150*time.Millisecond - us, cost: 1, q: 20, want: denied(0, 250001*us, us), why: "still beyond the wait by 1µs"},
		{at: 150 * time.Millisecond, cost: 1, q: 20, want: delayed(250*time.Millisecond, 0, 300*time.Millisecond), why: "a wait of exactly MaxWait, and the slot after it 50ms on"},
	}},
	{"limit change", slots, []timeStep{
		{at: 0, cost: 2, want: allowed(0, 0), why: "a new key's slots"},
		{at: time.Second - us, cost: 1, q: 3, want: allowed(0, 0), why: "quota raised to 3: one more slot, the two held still held"},
		{at: time.Second - us, cost: 1, q: 1, want: denied(0, 0, core.ConcurrencyRetryAfter), why: "quota lowered to 1, below the 3 held"},
	}},
}

// expiryLimits are the limits the expiry check spends and leaves alone.
var expiryLimits = []core.Limit{
	fixed1s, fixed7ms, sliding, slidLog, token, tokenOdd,
	{Algorithm: core.LeakyBucket, Quota: 10, Window: time.Second, Burst: 3, MaxWait: 50 * time.Millisecond},
}

// A traveller takes from one store, moving its clock on.
type traveller struct {
	ctx   context.Context
	s     core.Store
	clock *fakeclock.Clock
	last  int64 // the latest time set, µs
}

// boundary returns the first multiple of w µs after the latest time set.
func (tr *traveller) boundary(w int64) int64 { return (tr.last/w + 1) * w }

// take sets the clock to now (µs) and takes it there.
func (tr *traveller) take(now int64, it core.Item) (core.Outcome, error) {
	tr.clock.Set(time.UnixMicro(now))
	tr.last = max(tr.last, now)
	out, err := take(tr.ctx, tr.s, it)
	if err != nil {
		return core.Outcome{}, err
	}
	return out[0], nil
}

// run runs c on a new key from the next boundary, and returns its first
// step the store got wrong.
func (tr *traveller) run(c timeCase) error {
	start := tr.boundary(c.limit.Window.Microseconds())
	it := core.Item{Budget: "storetest-time-" + c.limit.Algorithm.String(), Key: fresh()}
	for i, st := range c.steps {
		it.Limit, it.Cost = c.limit, st.cost
		if st.q > 0 {
			it.Limit.Quota = st.q
		}
		if st.burst > 0 {
			it.Limit.Burst = st.burst
		}
		o, err := tr.take(start+st.at.Microseconds(), it)
		if err != nil {
			return err
		}
		if !sameOutcome(o, st.want) {
			return fmt.Errorf("%s, %s: step %d, %v after a boundary, cost %d%s (%s): got %s; want %s",
				c.check, limitString(c.limit), i+1, st.at, st.cost, changed(c.limit, it.Limit), st.why, outcomeString(o), outcomeString(st.want))
		}
	}
	return nil
}

// expiry spends a key of limit l in full, a third of a window after a
// boundary, and checks that after each idle spell it is as new: a take of
// one unit has a new key's outcome, the rest of the capacity is there,
// and no more. Right before the moment its state is documented to be
// empty, a twin key spent at the same instant must not be as new.
func (tr *traveller) expiry(l core.Limit) []error {
	w, capacity := l.Window.Microseconds(), l.Capacity()
	var errs []error
	for _, idle := range []struct {
		name  string
		until func(t0 int64) int64
	}{
		{"until its state is empty", func(t0 int64) int64 { return emptyAt(l, t0) }},
		{"for three windows", func(t0 int64) int64 { return t0 + 3*w + 1 }},
		{"for a million windows", func(t0 int64) int64 { return t0 + 1_000_000*w + 1 }},
	} {
		t0 := tr.boundary(w) + w/3 + 7
		t1 := idle.until(t0)
		exact := idle.name == "until its state is empty"
		it := core.Item{Budget: "storetest-expiry-" + l.Algorithm.String(), Key: fresh(), Limit: l, Cost: capacity}
		twin := it // spent with it, and taken 1µs before it is empty
		twin.Key = fresh()
		fail := func(when string, cost int64, why string, got core.Outcome, want string) {
			errs = append(errs, fmt.Errorf("expiry, %s: a key spent in full (cost %d) %dµs after a boundary, left alone %s (%dµs), %s: cost %d (%s): got %s; want %s",
				limitString(l), capacity, t0%w, idle.name, t1-t0, when, cost, why, outcomeString(got), want))
		}
		spent := []core.Item{it}
		if exact {
			spent = append(spent, twin)
		}
		ok := true
		for _, k := range spent {
			o, err := tr.take(t0, k)
			if err != nil {
				return append(errs, err)
			}
			if want := asNew(l, capacity, t0); ok && !sameOutcome(o, want) {
				fail("before that", capacity, "a new key's whole capacity", o, outcomeString(want))
				ok = false
			}
		}
		if !ok {
			continue
		}
		if exact {
			o, err := tr.take(t1-1, twin)
			if err != nil {
				return append(errs, err)
			}
			if want := justBeforeEmpty(l); !sameOutcome(o, want) {
				fail("1µs before then", capacity, "still spent", o, outcomeString(want))
				continue
			}
		}
		it.Cost = 1
		o, err := tr.take(t1, it)
		if err != nil {
			return append(errs, err)
		}
		if want := asNew(l, 1, t1); !sameOutcome(o, want) {
			fail("then", 1, "as new", o, outcomeString(want))
			continue
		}
		if capacity > 1 {
			it.Cost = capacity - 1
			if o, err = tr.take(t1, it); err != nil {
				return append(errs, err)
			}
			if want := asNew(l, capacity, t1); !sameOutcome(o, want) {
				fail("then", capacity-1, "the rest of the capacity, as new", o, outcomeString(want))
				continue
			}
		}
		it.Cost = 1
		if o, err = tr.take(t1, it); err != nil {
			return append(errs, err)
		}
		if o.Allowed || o.Charged || o.Remaining != 0 {
			fail("then", 1, "no more than the capacity", o, "denied, not charged, remaining 0")
		}
	}
	return errs
}

// emptyAt is the time (µs) from which the state of l left by one take of
// its whole capacity at t0 (µs) is equivalent to an empty one: the end of
// the fixed window; the start of the sliding window counter's window two
// windows on (in ms); the log's entry leaving the window; the bucket's
// theoretical arrival time.
func emptyAt(l core.Limit, t0 int64) int64 {
	w := l.Window.Microseconds()
	switch l.Algorithm {
	case core.FixedWindow:
		return t0/w*w + w
	case core.SlidingWindow:
		wm := w / 1000
		return (t0/1000/wm*wm + 2*wm) * 1000
	case core.SlidingLog:
		return t0 + w
	case core.TokenBucket, core.LeakyBucket:
		return t0 + l.Capacity()*l.Interval()
	}
	return t0
}

// justBeforeEmpty is the outcome of a take of l's whole capacity 1µs
// before emptyAt, after one take of it: denied with 1µs to go (the
// sliding window counter, in ms: its previous window weighs 1/wm, and
// a whole ms to go); a leaky bucket admits it with a wait of 1µs.
func justBeforeEmpty(l core.Limit) core.Outcome {
	switch l.Algorithm {
	case core.SlidingWindow:
		wm := l.Window.Milliseconds()
		return denied((l.Quota*wm-l.Quota)/wm, time.Millisecond, time.Millisecond)
	case core.TokenBucket:
		return denied(l.Burst-1, us, us)
	case core.LeakyBucket:
		return delayed(us, 0, time.Duration(l.Burst*l.Interval()+1)*us)
	}
	return denied(0, us, us)
}

// asNew is the outcome of a take of cost units at now (µs) of a key with
// nothing spent under l, by the algorithm's definition.
func asNew(l core.Limit, cost, now int64) core.Outcome {
	o := allowed(l.Capacity()-cost, 0)
	w := l.Window.Microseconds()
	switch l.Algorithm {
	case core.FixedWindow:
		o.Reset = time.Duration(now/w*w+w-now) * us
	case core.SlidingWindow:
		wm, ms := w/1000, now/1000
		o.Reset = time.Duration(ms/wm*wm+wm-ms+wm) * time.Millisecond
	case core.SlidingLog:
		o.Reset = l.Window
	case core.TokenBucket, core.LeakyBucket:
		o.Reset = time.Duration(cost*l.Interval()) * us
	}
	return o
}

// sameOutcome compares what a step checks: all but Stamp.
func sameOutcome(got, want core.Outcome) bool {
	got.Stamp, want.Stamp = 0, 0
	return got == want
}

func outcomeString(o core.Outcome) string {
	var b strings.Builder
	if o.Allowed {
		b.WriteString("allowed")
	} else {
		b.WriteString("denied")
	}
	if o.Charged {
		b.WriteString(", charged")
	} else {
		b.WriteString(", not charged")
	}
	fmt.Fprintf(&b, ", remaining %d, reset %v", o.Remaining, o.Reset)
	if o.RetryAfter != 0 {
		fmt.Fprintf(&b, ", retry-after %v", o.RetryAfter)
	}
	if o.Delay != 0 {
		fmt.Fprintf(&b, ", delay %v", o.Delay)
	}
	return b.String()
}

func limitString(l core.Limit) string {
	s := fmt.Sprintf("%s q=%d w=%v", l.Algorithm, l.Quota, l.Window)
	if l.Burst > 0 {
		s += fmt.Sprintf(" burst=%d", l.Burst)
	}
	if l.MaxWait > 0 {
		s += fmt.Sprintf(" max-wait=%v", l.MaxWait)
	}
	return s
}

// changed says how a step's limit differs from its case's.
func changed(from, to core.Limit) string {
	switch {
	case to.Burst != from.Burst:
		return fmt.Sprintf(" under quota %d burst %d", to.Quota, to.Burst)
	case to.Quota != from.Quota:
		return fmt.Sprintf(" under quota %d", to.Quota)
	}
	return ""
}
