// Package algorithm holds the one Go definition of every algorithm: how a
// key's State answers a cost at an instant (Eval), what a charge leaves
// (Commit), what a refund gives back (Refund) and when a state is as good
// as empty (Expiry). Times are integer Unix microseconds (the sliding
// window counter works in milliseconds). The memory store (core/memstore)
// runs these functions; the Redis store's Lua scripts mirror them line for
// line, and a differential test drives both with the same operations and
// clock.
package algorithm

import (
	"math"
	"time"

	"github.com/quotagate/quotagate/core"
)

// State is one key's state. Its fields mean, per algorithm:
//
//	FixedWindow:   A = window start (µs), B = count
//	SlidingWindow: A = current window start (ms), B = current count, C = previous count
//	TokenBucket, LeakyBucket: A = theoretical arrival time (µs)
//	SlidingLog:    Log
//	Concurrency:   A = slots held (the memory store keeps no lease)
type State struct {
	A, B, C int64
	Log     *Log
}

// Log is a ring of admitted entries, oldest first, and their total.
type Log struct {
	ts, n []int64
	head  int
	size  int
	sum   int64
}

// Sum returns the units the log holds.
func (g *Log) Sum() int64 { return g.sum }

// Len returns how many entries the log holds.
func (g *Log) Len() int { return g.size }

// At returns the time and units of entry i, oldest first.
func (g *Log) At(i int) (ts, n int64) { return g.at(i) }

// Cap returns the size of the log's ring.
func (g *Log) Cap() int { return len(g.ts) }

func (g *Log) at(i int) (ts, n int64) {
	j := (g.head + i) % len(g.ts)
	return g.ts[j], g.n[j]
}

// prune drops entries that left the window ending at now: an entry at ts
// counts while ts > now-window.
func (g *Log) prune(now, window int64) {
	for g.size > 0 && g.ts[g.head] <= now-window {
		g.sum -= g.n[g.head]
		g.head = (g.head + 1) % len(g.ts)
		g.size--
	}
}

func (g *Log) push(ts, n int64) {
	if g.size > 0 {
		if last := (g.head + g.size - 1) % len(g.ts); g.ts[last] == ts {
			g.n[last] += n
			g.sum += n
			return
		}
	}
	if g.size == len(g.ts) {
		c := 2 * len(g.ts)
		if c == 0 {
			c = 4
		}
		ts2, n2 := make([]int64, c), make([]int64, c)
		for i := 0; i < g.size; i++ {
			ts2[i], n2[i] = g.at(i)
		}
		g.ts, g.n, g.head = ts2, n2, 0
	}
	j := (g.head + g.size) % len(g.ts)
	g.ts[j], g.n[j] = ts, n
	g.size++
	g.sum += n
}

// remove takes back up to n units from the entry stamped ts, searching
// from the newest entry. An entry left with no units is removed, and the
// entries after it move up, so a log never holds empty entries (a refund
// that empties the newest entry makes the one before it the newest).
func (g *Log) remove(ts, n int64) {
	for i := g.size - 1; i >= 0; i-- {
		j := (g.head + i) % len(g.ts)
		if g.ts[j] > ts {
			continue
		}
		if g.ts[j] < ts {
			return // entries are in time order: none is stamped ts
		}
		take := min(n, g.n[j])
		g.n[j] -= take
		g.sum -= take
		if g.n[j] == 0 {
			g.drop(i)
		}
		return
	}
}

// drop removes the i-th entry (0 is the oldest), moving the later entries
// up by one.
func (g *Log) drop(i int) {
	for ; i < g.size-1; i++ {
		j, k := (g.head+i)%len(g.ts), (g.head+i+1)%len(g.ts)
		g.ts[j], g.n[j] = g.ts[k], g.n[k]
	}
	g.size--
}

// FloorDiv returns floor(a/b).
func FloorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// CeilDiv returns ceil(a/b).
func CeilDiv(a, b int64) int64 {
	return -FloorDiv(-a, b)
}

func us(d int64) time.Duration { return time.Duration(d) * time.Microsecond }

// Eval computes into o the outcome of spending cost under l at now (µs)
// from st, and returns the State after that charge. It does not modify st,
// except that a sliding log drops entries that have left the window. A
// denied charge returns the zero State (a sliding log: st itself); the
// caller keeps st.
func Eval(st *State, l *core.Limit, cost, now int64, o *core.Outcome) State {
	*o = core.Outcome{Stamp: now}
	switch l.Algorithm {
	case core.FixedWindow:
		return evalFixed(st, l, cost, now, o)
	case core.SlidingWindow:
		return evalSliding(st, l, cost, now, o)
	case core.TokenBucket, core.LeakyBucket:
		return evalBucket(st, l, cost, now, o)
	case core.SlidingLog:
		return evalLog(st, l, cost, now, o)
	case core.Concurrency:
		return evalConcurrency(st, l, cost, o)
	}
	return State{}
}

// evalFixed is Eval for a FixedWindow: windows aligned to the epoch; st.A
// is the stored window's start, st.B its count.
func evalFixed(st *State, l *core.Limit, cost, now int64, o *core.Outcome) (next State) {
	w, q := l.Window.Microseconds(), l.Quota
	var ws, count int64
	if st.A <= now && now < st.A+w {
		ws, count = st.A, st.B // still in the stored window
	} else {
		ws = FloorDiv(now, w) * w
	}
	reset := ws + w - now
	o.Reset = us(reset)
	if count+cost <= q {
		o.Allowed = true
		o.Remaining = q - count - cost
		return State{A: ws, B: count + cost}
	}
	o.Remaining = max(0, q-count)
	o.RetryAfter = us(reset)
	return next
}

// evalSliding is Eval for a SlidingWindow counter, in milliseconds: st.A
// is the current window's start, st.B its count and st.C the previous
// window's, weighted by the part of it the sliding window still covers.
func evalSliding(st *State, l *core.Limit, cost, now int64, o *core.Outcome) (next State) {
	q := l.Quota
	nowMS := FloorDiv(now, 1000)
	wm := l.Window.Microseconds() / 1000
	ws := FloorDiv(nowMS, wm) * wm
	var curr, prev int64
	switch st.A {
	case ws:
		curr, prev = st.B, st.C
	case ws - wm:
		prev = st.B
	}
	rem := ws + wm - nowMS // (0, wm]: the part of the previous window still covered
	fits := func(c int64) bool { return prev*rem+c*wm <= q*wm }
	left := func(c int64) int64 { return max(0, FloorDiv(q*wm-prev*rem, wm)-c) }
	if fits(curr + cost) {
		o.Allowed = true
		curr += cost
		o.Remaining = left(curr)
		next = State{A: ws, B: curr, C: prev}
	} else {
		o.Remaining = left(curr)
		// Within this window the weight of prev decays; find the
		// latest rem' with prev*rem' <= (q-curr-cost)*wm.
		var wait int64
		need := (q - curr - cost) * wm
		if need >= 0 && prev > 0 && FloorDiv(need, prev) > 0 {
			wait = rem - FloorDiv(need, prev)
		} else {
			// In the next window prev' = curr, curr' = 0: wait until
			// curr*rem'' <= (q-cost)*wm.
			wait = rem
			if curr > 0 {
				wait += max(0, wm-FloorDiv((q-cost)*wm, curr))
			}
		}
		o.RetryAfter = us(wait * 1000)
	}
	switch {
	case curr > 0:
		o.Reset = us((rem + wm) * 1000)
	case prev > 0:
		o.Reset = us(rem * 1000)
	}
	return next
}

// evalBucket is Eval for a TokenBucket or a LeakyBucket, by GCRA: st.A is
// the theoretical arrival time; a LeakyBucket admits a request that may
// start within MaxWait, with that Delay.
func evalBucket(st *State, l *core.Limit, cost, now int64, o *core.Outcome) (next State) {
	t := CeilDiv(l.Window.Microseconds(), l.Quota)
	bw := l.Burst * t
	tat := max(st.A, now)
	newTAT := tat + cost*t
	allowAt := newTAT - bw
	switch {
	case allowAt <= now:
		o.Allowed = true
	case l.Algorithm == core.LeakyBucket && allowAt-now <= l.MaxWait.Microseconds():
		o.Allowed = true
		o.Delay = us(allowAt - now)
	}
	if o.Allowed {
		d := newTAT - now
		o.Remaining = max(0, (bw-d)/t)
		o.Reset = us(d)
		return State{A: newTAT}
	}
	o.Remaining = max(0, (bw-(tat-now))/t)
	o.Reset = us(tat - now)
	wait := allowAt - now
	if l.Algorithm == core.LeakyBucket {
		wait -= l.MaxWait.Microseconds()
	}
	o.RetryAfter = us(wait)
	return next
}

// evalLog is Eval for a SlidingLog: st.Log holds the time and cost of
// every charge still in the window; the caller appends the new entry.
func evalLog(st *State, l *core.Limit, cost, now int64, o *core.Outcome) State {
	w, q := l.Window.Microseconds(), l.Quota
	g := st.Log
	var used int64
	if g != nil {
		g.prune(now, w)
		used = g.sum
	}
	if used+cost <= q {
		o.Allowed = true
		o.Remaining = q - used - cost
		o.Reset = us(w) // the entry just added is the newest
		return *st
	}
	o.Remaining = max(0, q-used)
	if g.size > 0 {
		newest, _ := g.at(g.size - 1)
		o.Reset = us(newest + w - now)
	}
	// Wait until enough of the oldest entries leave the window.
	excess := used + cost - q
	for i := 0; i < g.size; i++ {
		ts, n := g.at(i)
		excess -= n
		if excess <= 0 {
			o.RetryAfter = us(ts + w - now)
			break
		}
	}
	return *st
}

// evalConcurrency is Eval for a Concurrency budget: st.A is the slots in
// flight. Nothing resets by itself, and no time is known at which a slot
// frees, so Reset is 0 and a denial's RetryAfter is
// core.ConcurrencyRetryAfter.
func evalConcurrency(st *State, l *core.Limit, cost int64, o *core.Outcome) (next State) {
	q := l.Quota
	if st.A+cost <= q {
		o.Allowed = true
		o.Remaining = q - st.A - cost
		return State{A: st.A + cost}
	}
	o.Remaining = max(0, q-st.A)
	o.RetryAfter = core.ConcurrencyRetryAfter
	return next
}

// uncharged is the outcome of an item that would have been allowed in a
// take that was denied as a whole: the current State, as a cost-0
// evaluation sees it, still marked Allowed.
func Uncharged(st *State, l *core.Limit, now int64) core.Outcome {
	var o core.Outcome
	Eval(st, l, 0, now, &o)
	o.Allowed, o.RetryAfter, o.Delay = true, 0, 0
	return o
}

// commit stores next (from eval) as the State after charging cost at now.
func Commit(st *State, next State, l *core.Limit, cost, now int64) {
	if l.Algorithm == core.SlidingLog {
		if st.Log == nil {
			st.Log = &Log{}
		}
		if cost > 0 {
			st.Log.push(now, cost)
		}
		return
	}
	st.A, st.B, st.C = next.A, next.B, next.C
}

// refund gives back cost charged with outcome o, as Store.Refund describes,
// at now (µs). A token or leaky bucket gives back only the part of the
// charge not yet drained: the charge left the TAT at chargeTAT = o.Stamp +
// o.Reset, so the refund subtracts clamp(chargeTAT-now, 0, cost×T) from the
// TAT (the whole cost×T when it comes at once).
func Refund(st *State, l *core.Limit, cost int64, o *core.Outcome, now int64) {
	stamp := o.Stamp
	w := l.Window.Microseconds()
	switch l.Algorithm {
	case core.FixedWindow:
		if FloorDiv(stamp, w)*w == st.A {
			st.B = max(0, st.B-cost)
		}
	case core.SlidingWindow:
		wm := w / 1000
		ws := FloorDiv(FloorDiv(stamp, 1000), wm) * wm
		switch ws {
		case st.A:
			st.B = max(0, st.B-cost)
		case st.A - wm:
			st.C = max(0, st.C-cost)
		}
	case core.TokenBucket, core.LeakyBucket:
		chargeTAT := stamp + o.Reset.Microseconds()
		st.A -= min(max(chargeTAT-now, 0), cost*CeilDiv(w, l.Quota))
	case core.SlidingLog:
		if st.Log != nil {
			st.Log.remove(stamp, cost)
		}
	case core.Concurrency:
		st.A = max(0, st.A-cost)
	}
}

// expiry is the time (µs) from which st is equivalent to an empty State.
func Expiry(st *State, l *core.Limit) int64 {
	w := l.Window.Microseconds()
	switch l.Algorithm {
	case core.FixedWindow:
		return st.A + w
	case core.SlidingWindow:
		return (st.A + 2*(w/1000)) * 1000
	case core.TokenBucket, core.LeakyBucket:
		return st.A
	case core.SlidingLog:
		if g := st.Log; g != nil && g.size > 0 {
			newest, _ := g.at(g.size - 1)
			return newest + w
		}
	case core.Concurrency:
		if st.A > 0 {
			return math.MaxInt64 // held slots never expire in memory
		}
	}
	return 0
}
