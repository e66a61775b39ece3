package core

import (
	"math"
	"time"
)

// This file holds the one definition of every algorithm. Times are integer
// Unix microseconds (the sliding window counter works in milliseconds); the
// Redis store's Lua scripts mirror these functions line for line, and a
// differential test drives both with the same operations and clock.

// state is one key's state. Its fields mean, per algorithm:
//
//	FixedWindow:   a = window start (µs), b = count
//	SlidingWindow: a = current window start (ms), b = current count, c = previous count
//	TokenBucket, LeakyBucket: a = theoretical arrival time (µs)
//	SlidingLog:    log
//	Concurrency:   a = slots held (the memory store keeps no lease)
type state struct {
	a, b, c int64
	log     *slidingLog
}

// slidingLog is a ring of admitted entries, oldest first, and their total.
type slidingLog struct {
	ts, n []int64
	head  int
	size  int
	sum   int64
}

func (g *slidingLog) at(i int) (ts, n int64) {
	j := (g.head + i) % len(g.ts)
	return g.ts[j], g.n[j]
}

// prune drops entries that left the window ending at now: an entry at ts
// counts while ts > now-window.
func (g *slidingLog) prune(now, window int64) {
	for g.size > 0 && g.ts[g.head] <= now-window {
		g.sum -= g.n[g.head]
		g.head = (g.head + 1) % len(g.ts)
		g.size--
	}
}

func (g *slidingLog) push(ts, n int64) {
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
func (g *slidingLog) remove(ts, n int64) {
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
func (g *slidingLog) drop(i int) {
	for ; i < g.size-1; i++ {
		j, k := (g.head+i)%len(g.ts), (g.head+i+1)%len(g.ts)
		g.ts[j], g.n[j] = g.ts[k], g.n[k]
	}
	g.size--
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 {
	return -floorDiv(-a, b)
}

func us(d int64) time.Duration { return time.Duration(d) * time.Microsecond }

// eval computes into o the outcome of spending cost under l at now (µs)
// from st, and returns the state after that charge. It does not modify st,
// except that a sliding log drops entries that have left the window.
func eval(st *state, l *Limit, cost, now int64, o *Outcome) (next state) {
	*o = Outcome{Stamp: now}
	w := l.Window.Microseconds()
	q := l.Quota
	switch l.Algorithm {
	case FixedWindow:
		var ws, count int64
		if st.a <= now && now < st.a+w {
			ws, count = st.a, st.b // still in the stored window
		} else {
			ws = floorDiv(now, w) * w
		}
		reset := ws + w - now
		o.Reset = us(reset)
		if count+cost <= q {
			o.Allowed = true
			o.Remaining = q - count - cost
			next = state{a: ws, b: count + cost}
		} else {
			o.Remaining = max(0, q-count)
			o.RetryAfter = us(reset)
		}

	case SlidingWindow:
		nowMS := floorDiv(now, 1000)
		wm := w / 1000
		ws := floorDiv(nowMS, wm) * wm
		var curr, prev int64
		switch st.a {
		case ws:
			curr, prev = st.b, st.c
		case ws - wm:
			prev = st.b
		}
		rem := ws + wm - nowMS // (0, wm]: the part of the previous window still covered
		fits := func(c int64) bool { return prev*rem+c*wm <= q*wm }
		left := func(c int64) int64 { return max(0, floorDiv(q*wm-prev*rem, wm)-c) }
		if fits(curr + cost) {
			o.Allowed = true
			curr += cost
			o.Remaining = left(curr)
			next = state{a: ws, b: curr, c: prev}
		} else {
			o.Remaining = left(curr)
			// Within this window the weight of prev decays; find the
			// latest rem' with prev*rem' <= (q-curr-cost)*wm.
			var wait int64
			need := (q - curr - cost) * wm
			if need >= 0 && prev > 0 && floorDiv(need, prev) > 0 {
				wait = rem - floorDiv(need, prev)
			} else {
				// In the next window prev' = curr, curr' = 0: wait until
				// curr*rem'' <= (q-cost)*wm.
				wait = rem
				if curr > 0 {
					wait += max(0, wm-floorDiv((q-cost)*wm, curr))
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

	case TokenBucket, LeakyBucket:
		t := ceilDiv(w, q)
		bw := l.Burst * t
		tat := max(st.a, now)
		newTAT := tat + cost*t
		allowAt := newTAT - bw
		switch {
		case allowAt <= now:
			o.Allowed = true
		case l.Algorithm == LeakyBucket && allowAt-now <= l.MaxWait.Microseconds():
			o.Allowed = true
			o.Delay = us(allowAt - now)
		}
		if o.Allowed {
			d := newTAT - now
			o.Remaining = max(0, (bw-d)/t)
			o.Reset = us(d)
			next = state{a: newTAT}
		} else {
			o.Remaining = max(0, (bw-(tat-now))/t)
			o.Reset = us(tat - now)
			wait := allowAt - now
			if l.Algorithm == LeakyBucket {
				wait -= l.MaxWait.Microseconds()
			}
			o.RetryAfter = us(wait)
		}

	case SlidingLog:
		g := st.log
		var used int64
		if g != nil {
			g.prune(now, w)
			used = g.sum
		}
		if used+cost <= q {
			o.Allowed = true
			o.Remaining = q - used - cost
			o.Reset = us(w) // the entry just added is the newest
		} else {
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
		}
		next = *st

	case Concurrency:
		// Slots in flight: nothing resets by itself, and no time is known
		// at which a slot frees, so Reset is 0 and a denial's RetryAfter
		// is ConcurrencyRetryAfter.
		if st.a+cost <= q {
			o.Allowed = true
			o.Remaining = q - st.a - cost
			next = state{a: st.a + cost}
		} else {
			o.Remaining = max(0, q-st.a)
			o.RetryAfter = ConcurrencyRetryAfter
		}
	}
	return next
}

// ConcurrencyRetryAfter is the RetryAfter of a denied Concurrency budget.
// No store knows when a slot will free (when a request in flight
// finishes); one second is the smallest Retry-After that HTTP can say,
// and most requests guarded by a concurrency budget finish within it.
const ConcurrencyRetryAfter = time.Second

// uncharged is the outcome of an item that would have been allowed in a
// take that was denied as a whole: the current state, as a cost-0
// evaluation sees it, still marked Allowed.
func uncharged(st *state, l *Limit, now int64) Outcome {
	var o Outcome
	eval(st, l, 0, now, &o)
	o.Allowed, o.RetryAfter, o.Delay = true, 0, 0
	return o
}

// commit stores next (from eval) as the state after charging cost at now.
func commit(st *state, next state, l *Limit, cost, now int64) {
	if l.Algorithm == SlidingLog {
		if st.log == nil {
			st.log = &slidingLog{}
		}
		if cost > 0 {
			st.log.push(now, cost)
		}
		return
	}
	st.a, st.b, st.c = next.a, next.b, next.c
}

// refund gives back cost charged with outcome o, as Store.Refund describes,
// at now (µs). A token or leaky bucket gives back only the part of the
// charge not yet drained: the charge left the TAT at chargeTAT = o.Stamp +
// o.Reset, so the refund subtracts clamp(chargeTAT-now, 0, cost×T) from the
// TAT (the whole cost×T when it comes at once).
func refund(st *state, l *Limit, cost int64, o *Outcome, now int64) {
	stamp := o.Stamp
	w := l.Window.Microseconds()
	switch l.Algorithm {
	case FixedWindow:
		if floorDiv(stamp, w)*w == st.a {
			st.b = max(0, st.b-cost)
		}
	case SlidingWindow:
		wm := w / 1000
		ws := floorDiv(floorDiv(stamp, 1000), wm) * wm
		switch ws {
		case st.a:
			st.b = max(0, st.b-cost)
		case st.a - wm:
			st.c = max(0, st.c-cost)
		}
	case TokenBucket, LeakyBucket:
		chargeTAT := stamp + o.Reset.Microseconds()
		st.a -= min(max(chargeTAT-now, 0), cost*ceilDiv(w, l.Quota))
	case SlidingLog:
		if st.log != nil {
			st.log.remove(stamp, cost)
		}
	case Concurrency:
		st.a = max(0, st.a-cost)
	}
}

// expiry is the time (µs) from which st is equivalent to an empty state.
func expiry(st *state, l *Limit) int64 {
	w := l.Window.Microseconds()
	switch l.Algorithm {
	case FixedWindow:
		return st.a + w
	case SlidingWindow:
		return (st.a + 2*(w/1000)) * 1000
	case TokenBucket, LeakyBucket:
		return st.a
	case SlidingLog:
		if g := st.log; g != nil && g.size > 0 {
			newest, _ := g.at(g.size - 1)
			return newest + w
		}
	case Concurrency:
		if st.a > 0 {
			return math.MaxInt64 // held slots never expire in memory
		}
	}
	return 0
}
