package redisstore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A runLimit is how many script runs a batcher keeps in flight at once on
// its server (a single server, a cluster's master, a Ring's shard; one
// limit for all of a store's, held by its runGate), and the controller
// that moves it toward the number that answers decisions quickest.
//
// One run in flight makes the biggest batches: every Take that arrives
// while it is out joins the next one, the least work per decision for the
// client and the server. But under closed-loop load the callers then
// split into two groups that take turns, each waiting for the other's run
// and then its own; where a run's time is travel or wake-ups rather than
// work (every network, and loopback on a machine whose cores are not
// saturated) that halves throughput. More runs in flight make smaller
// batches and cost more work per decision, which pays only while the
// cores have it to spare. Which wins depends on the machine, the network
// and the load, so the limit is measured rather than set.
//
// The controller measures decisions' latency, from Take to answer, over
// windows of decisions, and from time to time probes: it measures a
// window with one run more in flight, and, unless that was quicker, a
// window with one less, and keeps whichever was quickest (one less when
// it is no slower: the fewest runs that are as quick leave the cores the
// most). A probe that found the limit right waits twice as many windows
// before the next (up to maxHold). Under closed-loop load the quickest
// decisions are also the most decisions per second (Little's law), and
// under open-loop load they are what callers wait for. A window in which
// no Take queued behind full slots does not probe: a limit the traffic
// does not reach is left where it is, and an idle server's decisions go
// out at once whatever the limit.
type runLimit struct {
	slots int // runs allowed in flight
	max   int
	full  bool // a Take queued behind full slots during the window

	// The window: decisions answered, their summed latency, runs; skip
	// is how many runs to leave out, those sent under another limit.
	latSum          time.Duration
	decisions, runs int
	skip            int

	phase   probePhase
	at      int           // the limit the probe started from
	atLat   time.Duration // the mean latency measured at that limit
	hold    int           // windows before the next probe
	backoff int           // windows between probes
}

// probePhase says what the current window measures.
type probePhase uint8

const (
	holding   probePhase = iota // the limit, between probes
	probeUp                     // one run more than at
	probeDown                   // one run less than at
)

const (
	// windowDecisions and minWindowRuns bound a window from below: at
	// least that many decisions, and that many runs or twice the limit.
	windowDecisions = 256
	minWindowRuns   = 8
	// upGain is how much quicker one run more in flight must be, as a
	// fraction, to be kept: more runs cost the cores more work.
	upGain = 0.03
	// maxRunSlots bounds the limit: with batches of up to DefaultMaxBatch,
	// 32 runs carry 2048 decisions in one round trip.
	maxRunSlots = 32
	// maxHold bounds the windows between two probes.
	maxHold = 16
)

// newRunLimit returns a limit of one run, which may grow up to half the
// client's connection pool per server and at most maxRunSlots.
func newRunLimit(client redis.UniversalClient) runLimit {
	most := maxRunSlots
	pool := 0 // connections per server
	switch c := client.(type) {
	case *redis.Client:
		pool = c.Options().PoolSize
	case *redis.ClusterClient:
		pool = c.Options().PoolSize
	case *redis.Ring:
		pool = c.Options().PoolSize
	}
	if pool > 0 {
		most = min(most, max(1, pool/2))
	}
	return runLimit{slots: 1, max: most, backoff: 1}
}

// observe records a run that answered n decisions, whose latencies sum to
// lat, and moves the limit at the end of a window.
func (l *runLimit) observe(lat time.Duration, n int) {
	if l.skip > 0 {
		l.skip--
		return
	}
	l.latSum += lat
	l.decisions += n
	if l.runs++; l.decisions < windowDecisions || l.runs < max(minWindowRuns, 2*l.slots) {
		return
	}
	mean := l.latSum / time.Duration(l.decisions)
	from := l.slots
	switch l.phase {
	case holding:
		if l.hold > 0 {
			l.hold--
			break
		}
		if !l.full {
			break
		}
		l.at, l.atLat = l.slots, mean
		switch {
		case l.slots < l.max:
			l.slots, l.phase = l.up(l.slots), probeUp
		case l.slots > 1:
			l.slots, l.phase = l.slots/2, probeDown
		}
	case probeUp:
		if float64(mean) < float64(l.atLat)*(1-upGain) {
			l.at, l.atLat, l.backoff = l.slots, mean, 1
			if l.slots < l.max {
				l.slots = l.up(l.slots) // keep climbing
			} else {
				l.phase, l.hold = holding, l.backoff
			}
			break
		}
		if l.at > 1 {
			l.slots, l.phase = l.at/2, probeDown
			break
		}
		l.settle(false)
	case probeDown:
		if mean <= l.atLat {
			l.at, l.atLat, l.backoff = l.slots, mean, 1
			if l.slots > 1 {
				l.slots /= 2 // keep descending
				break
			}
			l.settle(true)
			break
		}
		l.settle(false)
	}
	l.latSum, l.decisions, l.runs, l.full = 0, 0, 0, false
	if l.slots != from {
		l.skip = from // the runs in flight now were sent under from
	}
}

// up returns the limit a probe upward tries from n: twice n, at most max.
// Steps double because the latency curve has plateaus: on a network,
// eight callers answer no quicker with six runs than with four, and
// quickest with eight, each sent alone.
func (l *runLimit) up(n int) int { return min(2*n, l.max) }

// settle ends a probe at l.at and sets the wait before the next one,
// longer each time a probe finds the limit right.
func (l *runLimit) settle(moved bool) {
	l.slots, l.phase = l.at, holding
	if moved {
		l.backoff = 1
	} else {
		l.backoff = min(2*l.backoff, maxHold)
	}
	l.hold = l.backoff
}

// A runGate is the run limit a store's batchers share: one per store,
// whose limit each batcher applies to its own server (a cluster's master,
// a Ring's shard), moved by one controller over the decisions of them
// all. The servers' runs share the client's cores, and on one machine the
// servers' too: more runs in flight for one shard cost the others'
// decisions, which a controller per shard, seeing only its own, does not
// measure, and each climbs past the limit that serves every decision
// quickest (docs/performance.md has the figures).
type runGate struct {
	slots atomic.Int64 // lim.slots, for the batchers
	full  atomic.Bool  // a Take queued behind full slots since the last run

	mu  sync.Mutex
	lim runLimit
	n   int // batchers under the gate
}

// newRunGate returns the gate of a store on client, at one run in flight.
func newRunGate(client redis.UniversalClient) *runGate {
	g := &runGate{lim: newRunLimit(client)}
	g.slots.Store(int64(g.lim.slots))
	return g
}

// join counts one more batcher under g.
func (g *runGate) join() {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

// queued notes that a Take queued behind full slots. The flag is written
// once per run at most: every Take reads the limit beside it.
func (g *runGate) queued() {
	if !g.full.Load() {
		g.full.Store(true)
	}
}

// limit returns the runs each batcher may keep in flight.
func (g *runGate) limit() int { return int(g.slots.Load()) }

// observe records a run of any batcher under g, as runLimit.observe
// does. After a change every batcher's runs in flight were sent under
// the last limit, up to that many each, and are skipped.
func (g *runGate) observe(lat time.Duration, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.full.Swap(false) {
		g.lim.full = true
	}
	from := g.lim.slots
	g.lim.observe(lat, n)
	if g.lim.slots != from {
		g.lim.skip = from * max(1, g.n)
		g.slots.Store(int64(g.lim.slots))
	}
}
