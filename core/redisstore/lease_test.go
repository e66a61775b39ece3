package redisstore

import (
	"context"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// hotRun is what a hot-key run observed, per window of the outcomes'
// Stamps (the time Redis charged the units, or last answered for a
// denial served locally): the decisions and the units admitted. Counting
// is lock-free, so that it does not slow down what it measures.
type hotRun struct {
	slots     [hotSlots]hotSlot
	decisions atomic.Int64
	allowed   atomic.Int64
}

const hotSlots = 4096

type hotSlot struct {
	win           atomic.Int64 // window number + 1; 0 for unused
	dec, admitted atomic.Int64
}

func newHotRun() *hotRun { return &hotRun{} }

func (h *hotRun) record(w time.Duration, o *core.Outcome, cost int64) {
	h.decisions.Add(1)
	win := o.Stamp / w.Microseconds()
	sl := &h.slots[win%hotSlots]
	if sl.win.Load() != win+1 {
		sl.win.CompareAndSwap(0, win+1)
	}
	sl.dec.Add(1)
	if o.Charged {
		h.allowed.Add(1)
		sl.admitted.Add(cost)
	}
}

// windows returns the windows seen, in order, with their decisions and
// admitted units.
func (h *hotRun) windows() (wins, decs, units []int64) {
	type row struct{ w, d, u int64 }
	var rows []row
	for i := range h.slots {
		sl := &h.slots[i]
		if w := sl.win.Load(); w != 0 {
			rows = append(rows, row{w - 1, sl.dec.Load(), sl.admitted.Load()})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].w < rows[j].w })
	for _, r := range rows {
		wins, decs, units = append(wins, r.w), append(decs, r.d), append(units, r.u)
	}
	return wins, decs, units
}

// checkWindows fails for any window that admitted more than quota, and
// returns the windows seen and the largest under-admission among the
// windows after the first and before the last (the steady state): how
// far the units admitted fell below the least of the quota and the
// decisions asked (a window whose decisions were fewer than the quota
// could admit no more).
func (h *hotRun) checkWindows(t testing.TB, quota int64) (over, n int, worstShort int64) {
	wins, decs, units := h.windows()
	for i, u := range units {
		if u > quota {
			over++
			if t != nil {
				t.Errorf("window %d admitted %d units, quota %d", wins[i], u, quota)
			}
		}
		if i > 0 && i < len(units)-1 && wins[i] == wins[i-1]+1 {
			worstShort = max(worstShort, min(quota, decs[i])-u)
		}
	}
	return over, len(wins), worstShort
}

// charge is units admitted, charged in Redis at stamp (µs).
type charge struct{ stamp, units int64 }

func leasedLimit(alg core.Algorithm, quota int64, window time.Duration, max int64, ttl time.Duration) core.Limit {
	l := core.Limit{Algorithm: alg, Quota: quota, Window: window, Leasing: core.Leasing{Max: max, TTL: ttl}}
	if alg == core.TokenBucket {
		l.Burst = quota
	}
	return l
}

// TestLeaseProperty drives several stores (instances) sharing one Redis
// with random arrivals and random costs on one hot key, killing instances
// at random (their leases are dropped, not given back) and starting new
// ones: no window ever admits more than the quota, for every algorithm
// that leases.
func TestLeaseProperty(t *testing.T) {
	_, client := startServer(t)
	for _, alg := range []core.Algorithm{core.FixedWindow, core.SlidingWindow, core.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			testLeaseProperty(t, client, alg)
		})
	}
}

func testLeaseProperty(t *testing.T, client redis.UniversalClient, alg core.Algorithm) {
	const quota = 600
	window := 200 * time.Millisecond
	lim := leasedLimit(alg, quota, window, 100, 50*time.Millisecond)
	prefix := "prop:" + alg.String() + ":"
	ctx := context.Background()
	h := newHotRun()
	var mu sync.Mutex
	stores := make([]*Store, 4)
	for i := range stores {
		stores[i] = mustStore(t, client, Config{Prefix: prefix})
	}
	t0, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	var kills atomic.Int64
	var charges []charge
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 19))
			for time.Now().Before(stop) {
				i := rng.IntN(len(stores))
				mu.Lock()
				st := stores[i]
				if rng.IntN(400) == 0 {
					// An instance dies: its leases stay charged.
					st.kill()
					stores[i] = mustStore(t, client, Config{Prefix: prefix})
					kills.Add(1)
				}
				mu.Unlock()
				cost := int64(1 + rng.IntN(3))
				var out [1]core.Outcome
				if err := st.Take(ctx, []core.Item{item("b", "hot", lim, cost, false)}, out[:]); err != nil {
					t.Error(err)
					return
				}
				h.record(window, &out[0], cost)
				if out[0].Charged {
					mu.Lock()
					charges = append(charges, charge{out[0].Stamp, cost})
					mu.Unlock()
				}
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	t1, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stores {
		st.Close()
	}
	var local int64
	for _, st := range stores {
		local += st.LeaseStats().ServedLocal
	}
	if local == 0 {
		t.Errorf("no decision was served from a lease (%d decisions)", h.decisions.Load())
	}
	sort.Slice(charges, func(i, j int) bool { return charges[i].stamp < charges[j].stamp })
	switch alg {
	case core.TokenBucket:
		// Every charge comes from a bucket of quota tokens that was full
		// at t0 and refilled one token per window/quota since: the units
		// admitted at times (by the times Redis charged them) from x to y
		// are at most quota + (y-x)/T, and all of them at most
		// quota + (t1-t0)/T.
		T := window.Microseconds() / quota
		var total int64
		for _, c := range charges {
			total += c.units
		}
		if limit := int64(quota) + t1.Sub(t0).Microseconds()/T; total > limit {
			t.Errorf("admitted %d units, the bucket allows at most %d", total, limit)
		}
		for i := range charges {
			var sum int64
			for j := i; j < len(charges); j++ {
				sum += charges[j].units
				if limit := int64(quota) + (charges[j].stamp-charges[i].stamp)/T; sum > limit {
					t.Fatalf("admitted %d units from %d to %d µs, the bucket allows at most %d", sum, charges[i].stamp, charges[j].stamp, limit)
				}
			}
		}
	case core.SlidingWindow:
		h.checkWindows(t, quota)
		// The sliding window counter's own rule, at every charge: the
		// previous window's units weighted by the part of it still
		// covered, plus the current window's units so far, fit the quota.
		wm := window.Milliseconds()
		per := map[int64]int64{}
		for _, c := range charges {
			ws := c.stamp / 1000 / wm
			per[ws] += c.units
			rem := (ws+1)*wm - c.stamp/1000
			if prev, curr := per[ws-1], per[ws]; prev*rem+curr*wm > quota*wm {
				t.Fatalf("at %d µs: previous window %d units × %d/%d ms + current %d units exceed the quota %d", c.stamp, prev, rem, wm, curr, quota)
			}
		}
	default:
		h.checkWindows(t, quota)
	}
	t.Logf("%d decisions, %d admitted, %d served locally, %d kills", h.decisions.Load(), h.allowed.Load(), local, kills.Load())
}

// TestLeaseGivesBackAtExpiry: a lease whose instance stops deciding gives
// its unspent units back when its TTL passes, and a closed store gives
// back at once; a killed instance's units stay charged until its window
// ends, and never let the others admit more than the quota.
func TestLeaseGivesBackAtExpiry(t *testing.T) {
	_, client := startServer(t)
	ctx := context.Background()
	lim := leasedLimit(core.FixedWindow, core.MaxQuota, time.Hour, 1000, 200*time.Millisecond)
	// long is the same budget with leases that do not expire during the
	// test, for the parts that must not see an expiry.
	long := lim
	long.Leasing.TTL = core.MaxLeaseTTL
	a := mustStore(t, client, Config{Prefix: "exp:"})
	count := func() int64 {
		var out [1]core.Outcome
		if err := a.takeRemote(ctx, []core.Item{item("b", "k", withoutLease(lim), 0, false)}, out[:]); err != nil {
			t.Fatal(err)
		}
		return lim.Quota - out[0].Remaining
	}
	spent := heat(t, a, lim, "k")
	if a.leaseUnits("b", "k") == 0 {
		t.Fatalf("no lease after %d decisions: %+v", spent, a.LeaseStats())
	}
	if c := count(); c <= spent && a.LeaseStats().Expired == 0 {
		t.Fatalf("Redis counts %d units, %d spent: the lease is not charged", c, spent)
	}
	// The give-back counts the expiry once its Refund has returned, which
	// is after Redis shows the units back: wait for both.
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := a.LeaseStats()
		if a.leaseUnits("b", "k") == 0 && count() == spent && s.Expired > 0 && s.ExpiredUnits > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the TTL Redis counts %d units, %d spent; the expiry must be counted; stats %+v", count(), spent, s)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Close gives back at once.
	spent += heat(t, a, long, "k")
	if a.leaseUnits("b", "k") == 0 {
		t.Fatal("no lease")
	}
	a.Close()
	if c := count(); c != spent {
		t.Errorf("after Close Redis counts %d units, %d spent", c, spent)
	}

	// A killed instance strands its lease: the units stay charged (and so
	// can never be admitted twice) until the window ends.
	b := mustStore(t, client, Config{Prefix: "exp:"})
	spent += heat(t, b, long, "k")
	held := b.leaseUnits("b", "k")
	if held == 0 {
		t.Fatal("no lease")
	}
	b.kill()
	time.Sleep(300 * time.Millisecond)
	if c := count(); c != spent+held {
		t.Errorf("after the kill Redis counts %d units, want %d spent + %d stranded", c, spent, held)
	}
}

// heat makes st's key hot and returns the units it spent.
func heat(t *testing.T, st *Store, lim core.Limit, key string) int64 {
	t.Helper()
	var spent int64
	stop := time.Now().Add(3 * heatTick)
	for time.Now().Before(stop) || st.leaseUnits("b", key) == 0 {
		var out [1]core.Outcome
		if err := st.Take(context.Background(), []core.Item{item("b", key, lim, 1, false)}, out[:]); err != nil {
			t.Fatal(err)
		}
		if out[0].Charged {
			spent++
		}
		if time.Now().After(stop.Add(5 * time.Second)) {
			t.Fatalf("no lease: %+v", st.LeaseStats())
		}
	}
	return spent
}

func withoutLease(l core.Limit) core.Limit {
	l.Leasing = core.Leasing{}
	return l
}

// TestLeaseColdKey: a key that is not hot is decided by one call per
// decision, as without leasing.
func TestLeaseColdKey(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "cold:"})
	lim := leasedLimit(core.FixedWindow, 100, time.Hour, 50, 100*time.Millisecond)
	for i := 0; i < 5; i++ {
		var out [1]core.Outcome
		if err := st.Take(context.Background(), []core.Item{item("b", "k", lim, 1, false)}, out[:]); err != nil {
			t.Fatal(err)
		}
		if out[0].Remaining != int64(99-i) {
			t.Errorf("decision %d: remaining %d, want %d", i, out[0].Remaining, 99-i)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := st.LeaseStats(); s.Taken != 0 || s.ServedStore != 5 || s.ServedLocal != 0 {
		t.Errorf("stats %+v, want 5 decisions served by Redis and no lease", s)
	}
}

// TestLeaseAllOrNothing: a decision that spends a leased budget and a
// non-leased one charges neither when the non-leased one denies; the
// leased units go back to the lease.
func TestLeaseAllOrNothing(t *testing.T) {
	_, client := startServer(t)
	ctx := context.Background()
	st := mustStore(t, client, Config{Prefix: "aon:"})
	lim := leasedLimit(core.FixedWindow, core.MaxQuota, time.Hour, 1000, core.MaxLeaseTTL)
	spent := heat(t, st, lim, "k")
	// The first decision takes 2 units from the lease, and the second must
	// find some left, or it would lease afresh before its denial: spend
	// the lease's last units until it is renewed.
	for give := time.Now().Add(5 * time.Second); st.leaseUnits("b", "k") < 3; {
		if time.Now().After(give) {
			t.Fatalf("the lease was not renewed: %+v", st.LeaseStats())
		}
		var one [1]core.Outcome
		if err := st.Take(ctx, []core.Item{item("b", "k", lim, 1, false)}, one[:]); err != nil {
			t.Fatal(err)
		}
		if one[0].Charged {
			spent++
		}
	}
	strict := core.Limit{Algorithm: core.FixedWindow, Quota: 1, Window: time.Hour}
	held := st.leaseUnits("b", "k")
	items := []core.Item{item("b", "k", lim, 2, false), item("strict", "k", strict, 1, false)}
	out := make([]core.Outcome, 2)
	if err := st.Take(ctx, items, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Charged || !out[1].Charged || st.leaseUnits("b", "k") != held-2 {
		t.Fatalf("first decision: %+v, lease %d of %d", out, st.leaseUnits("b", "k"), held)
	}
	spent += 2
	if err := st.Take(ctx, items, out); err != nil {
		t.Fatal(err)
	}
	if out[1].Allowed || out[0].Charged || !out[0].Allowed || out[1].Charged {
		t.Fatalf("second decision: %+v, want strict denied and nothing charged", out)
	}
	if got := st.leaseUnits("b", "k"); got != held-2 {
		t.Errorf("lease holds %d units after the denial, want %d", got, held-2)
	}
	st.Close()
	var chk [1]core.Outcome
	if err := st.takeRemote(ctx, []core.Item{item("b", "k", withoutLease(lim), 0, false)}, chk[:]); err != nil {
		t.Fatal(err)
	}
	if c := lim.Quota - chk[0].Remaining; c != spent {
		t.Errorf("Redis counts %d units, %d spent", c, spent)
	}
}

// TestLeaseRemaining: a decision served from a lease reports as remaining
// what Redis had left, leases included, at the instance's last call: the
// units no instance holds.
func TestLeaseRemaining(t *testing.T) {
	_, client := startServer(t)
	ctx := context.Background()
	st := mustStore(t, client, Config{Prefix: "rem:"})
	lim := leasedLimit(core.FixedWindow, core.MaxQuota, time.Hour, 1000, core.MaxLeaseTTL)
	heat(t, st, lim, "k")
	before := st.LeaseStats()
	var out, chk [1]core.Outcome
	if err := st.Take(ctx, []core.Item{item("b", "k", lim, 1, false)}, out[:]); err != nil {
		t.Fatal(err)
	}
	if err := st.takeRemote(ctx, []core.Item{item("b", "k", withoutLease(lim), 0, false)}, chk[:]); err != nil {
		t.Fatal(err)
	}
	// Never more than Redis has left; exactly that unless a lease gave
	// units back meanwhile (it expired on a slow machine).
	after := st.LeaseStats()
	gaveBack := after.Returned+after.Expired != before.Returned+before.Expired
	if out[0].Remaining > chk[0].Remaining || !gaveBack && out[0].Remaining != chk[0].Remaining {
		t.Errorf("a local decision reports remaining %d; Redis has %d left", out[0].Remaining, chk[0].Remaining)
	}
}

// TestLeaseNearEnd: as the budget runs out, leases shrink and the last
// units are decided one call each: every unit of the quota is admitted,
// and no more.
func TestLeaseNearEnd(t *testing.T) {
	_, client := startServer(t)
	ctx := context.Background()
	lim := leasedLimit(core.FixedWindow, 5000, time.Hour, 1000, time.Second)
	stores := []*Store{mustStore(t, client, Config{Prefix: "end:"}), mustStore(t, client, Config{Prefix: "end:"})}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := stores[g%2]
			for i := 0; i < 4000; i++ {
				var out [1]core.Outcome
				if err := st.Take(ctx, []core.Item{item("b", "k", lim, 1, false)}, out[:]); err != nil {
					t.Error(err)
					return
				}
				if out[0].Charged {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// Demand (32,000) far exceeds the quota and each instance keeps
	// deciding until its own leases are empty: a unit is not admitted only
	// when a lease still holds it, or gave it back after the others had
	// stopped asking (a lease that expired on a slow machine).
	var unused int64
	for _, st := range stores {
		s := st.LeaseStats()
		unused += s.Held + s.ReturnedUnits + s.ExpiredUnits + s.StrandedUnits
	}
	if got := admitted.Load(); got > lim.Quota || got < lim.Quota-unused {
		t.Errorf("admitted %d of a quota of %d; leases hold or gave back %d", got, lim.Quota, unused)
	}
	t.Logf("admitted %d; stats %+v %+v", admitted.Load(), stores[0].LeaseStats(), stores[1].LeaseStats())
}

// TestLeaseCluster runs the property on a three-node Redis Cluster.
func TestLeaseCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := newClusterClient(t, c.Addrs())
	testLeaseProperty(t, client, core.FixedWindow)
}

// commandsTotal returns the calls of every command in INFO commandstats,
// those scripts run included, summed over the servers of client.
func commandsTotal(t testing.TB, client redis.UniversalClient) int64 {
	t.Helper()
	var total atomic.Int64
	count := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			_, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
			if !ok {
				continue
			}
			n, _, _ := strings.Cut(rest, ",")
			var v int64
			for _, ch := range n {
				v = v*10 + int64(ch-'0')
			}
			total.Add(v)
		}
		return nil
	}
	ctx := context.Background()
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, count)
	case *redis.Client:
		err = count(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return total.Load()
}

// resetStats resets INFO commandstats on every server of client.
func resetStats(t testing.TB, client redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.ConfigResetStat(ctx).Err() })
	case *redis.Client:
		err = c.ConfigResetStat(ctx).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// leaseRecorder is a core.Observer that sums lease events.
type leaseRecorder struct {
	mu     sync.Mutex
	events map[core.LeaseEvent][2]int64 // calls, units
}

func (r *leaseRecorder) ObserveDecision(*core.Request, *core.Decision, []core.Result, time.Duration) {
}
func (r *leaseRecorder) ObserveError(core.ErrorKind, string, error) {}
func (r *leaseRecorder) ObserveLease(budget string, ev core.LeaseEvent, units int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if budget != "b" {
		panic("lease event for budget " + budget)
	}
	v := r.events[ev]
	r.events[ev] = [2]int64{v[0] + 1, v[1] + units}
}

// TestLeaseObserver: the store's observer is told of every lease taken and
// given back, as LeaseStats counts them, and of the decisions it served.
func TestLeaseObserver(t *testing.T) {
	_, client := startServer(t)
	rec := &leaseRecorder{events: map[core.LeaseEvent][2]int64{}}
	st := mustStore(t, client, Config{Prefix: "obs:", Observer: rec})
	lim := leasedLimit(core.FixedWindow, core.MaxQuota, time.Hour, 1000, core.MaxLeaseTTL)
	heat(t, st, lim, "k")
	// heat returns once a lease is held, which on a busy machine can be
	// its last decision: take one more, from the lease.
	var out [1]core.Outcome
	if err := st.Take(context.Background(), []core.Item{item("b", "k", lim, 1, false)}, out[:]); err != nil || !out[0].Charged {
		t.Fatalf("a take with a lease held: %v, %+v", err, out[0])
	}
	// That take may have spent the lease's last unit (every lease of a
	// failing run was spent to the unit, 30 of 999 each, and Close had
	// nothing to give back): take until a lease holds units again.
	for i := 0; st.leaseUnits("b", "k") == 0; i++ {
		if i == 10000 {
			t.Fatalf("no lease held after %d more takes: %+v", i, st.LeaseStats())
		}
		if err := st.Take(context.Background(), []core.Item{item("b", "k", lim, 1, false)}, out[:]); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	s := st.LeaseStats()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got := rec.events[core.LeaseTaken]; got != [2]int64{s.Taken, s.TakenUnits} || s.Taken == 0 {
		t.Errorf("taken: observed %v, stats %+v", got, s)
	}
	if got := rec.events[core.LeaseReturned]; got != [2]int64{s.Returned, s.ReturnedUnits} || s.Returned == 0 {
		t.Errorf("returned: observed %v, stats %+v", got, s)
	}
	local, remote := rec.events[core.LeaseServedLocal][1], rec.events[core.LeaseServedStore][1]
	if local == 0 || local > s.ServedLocal || remote == 0 || remote > s.ServedStore {
		t.Errorf("served: observed %d local and %d by Redis, stats %+v", local, remote, s)
	}
}

// TestLeaseWithoutFunctions: on a server without Redis functions, leases
// are taken by EVALSHA of the same Lua, and given back.
func TestLeaseWithoutFunctions(t *testing.T) {
	srv := redistest.Start(t, noFunctionsArgs...)
	client := newClient(t, srv.Addr())
	st := mustStore(t, client, Config{Prefix: "nofn:"})
	lim := leasedLimit(core.FixedWindow, core.MaxQuota, time.Hour, 1000, core.MaxLeaseTTL)
	spent := heat(t, st, lim, "k")
	if st.LeaseStats().Taken == 0 {
		t.Fatalf("no lease taken: %+v", st.LeaseStats())
	}
	st.Close()
	var chk [1]core.Outcome
	if err := st.takeRemote(context.Background(), []core.Item{item("b", "k", withoutLease(lim), 0, false)}, chk[:]); err != nil {
		t.Fatal(err)
	}
	if c := lim.Quota - chk[0].Remaining; c != spent {
		t.Errorf("Redis counts %d units, %d spent", c, spent)
	}
	if n := commandCalls(t, client, "evalsha") + commandCalls(t, client, "eval"); n == 0 {
		t.Error("no script ran")
	}
}

// TestLeaseRedisDown: while Redis is down, a lease already held keeps
// serving its key until it ends; the units it could not give back at its
// expiry are counted as stranded; then decisions fail (and the engine's
// failure mode applies).
func TestLeaseRedisDown(t *testing.T) {
	srv, client := startServer(t)
	ctx := context.Background()
	st := mustStore(t, client, Config{Prefix: "down:", Timeout: 200 * time.Millisecond})
	lim := leasedLimit(core.FixedWindow, core.MaxQuota, time.Hour, 1000, 2*time.Second)
	heat(t, st, lim, "k")
	srv.Stop()
	var out [1]core.Outcome
	if err := st.Take(ctx, []core.Item{item("b", "k", lim, 1, false)}, out[:]); err != nil || !out[0].Charged {
		t.Fatalf("with a lease held and Redis down: %v, %+v", err, out[0])
	}
	held := st.leaseUnits("b", "k")
	if held == 0 {
		t.Fatalf("the lease is spent: %+v", st.LeaseStats())
	}
	deadline := time.Now().Add(10 * time.Second)
	for st.LeaseStats().StrandedUnits < held {
		if time.Now().After(deadline) {
			t.Fatalf("%d units held, stats %+v", held, st.LeaseStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := st.Take(ctx, []core.Item{item("b", "k", lim, 1, false)}, out[:]); err == nil {
		t.Fatalf("a decision after the lease ended succeeded with Redis down: %+v", out[0])
	}
	st.Close()
}
