package redisstore

// This file watches the Sentinels of a store's master (Config.Sentinel)
// and makes the store refuse its calls from the moment a Sentinel starts
// promoting a replica until the store's client reaches the new master
// (see the package documentation, Planned Sentinel failovers).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultMaxRefusal bounds how long a store with [Config.Sentinel]
// refuses calls for one failover unless [SentinelWatch.MaxRefusal] says
// otherwise.
const DefaultMaxRefusal = 30 * time.Second

// ErrFailingOver is the error of every store call refused while a Sentinel
// fails over the store's master (see [SentinelWatch]). The engine applies
// each budget's failure mode to it and reports it as any store error (kind
// core.KindStoreError, logged by the engine's logger); errors.Is tells it
// apart. Nothing was sent to Redis: a refused call charged nothing.
var ErrFailingOver = errors.New("failing over: a Sentinel is promoting a replica, and the store refuses calls until its client reaches the new master")

// SentinelWatch names the Sentinels that monitor a store's master, for
// [Config.Sentinel]. A store given one watches them for failovers of
// MasterName and refuses every call, with [ErrFailingOver], from the moment
// a Sentinel is elected to promote a replica (its +elected-leader event)
// until that failover ends: aborted (a -failover-abort-* event), or
// finished (+switch-master) and the store's client no longer reaching the
// old master (the server it answers from has another run_id, from INFO
// server). Writes the old master took after the promotion would be thrown
// away when it rejoins as a replica; refused calls make each budget apply
// its failure mode instead, and are logged, so no charge is lost silently.
//
// What it costs: one atomic load per script run while no failover is under
// way; a subscription and a PING a second per Sentinel; the calls of the
// failover's window fail (about a second in a planned failover with one
// replica). See the package documentation, Planned Sentinel failovers.
//
// [New] refuses a watch without Addrs or MasterName, on a cluster client or
// a Ring, a Sentinel that answers that it monitors no master of that name,
// and a client that reaches another server than the master the Sentinels
// name (INFO server's run_id); Sentinels that do not answer then are
// watched anyway, and retried. The store's servers must allow INFO. The
// store copies the watch; changing it after New has no effect.
type SentinelWatch struct {
	// Addrs are addresses ("host:port") of Sentinels that monitor the
	// master, such as redis.FailoverOptions.SentinelAddrs. At least one.
	// The store also watches every other Sentinel they know for
	// MasterName (SENTINEL SENTINELS, and +sentinel events), so that a
	// failover started on any of them is seen.
	Addrs []string

	// MasterName is the name the Sentinels monitor the master as
	// (redis.FailoverOptions.MasterName). Required.
	MasterName string

	// Username and Password authenticate to the Sentinels
	// (redis.FailoverOptions.SentinelUsername and SentinelPassword).
	// Optional.
	Username, Password string

	// TLSConfig, when set, is used to connect to the Sentinels. Optional.
	TLSConfig *tls.Config

	// MaxRefusal bounds how long the store refuses calls for one
	// failover, should it neither end nor the client follow it (a client
	// that does not follow Sentinel, Sentinels unreachable mid-failover).
	// The store then sends calls again and logs an error: charges the old
	// master takes from then on may be lost. A failover whose replicas are
	// reconfigured one by one with large data sets (Sentinel's
	// parallel-syncs) can take longer than the default. Default
	// DefaultMaxRefusal (30 s).
	MaxRefusal time.Duration

	// Logger receives a line when the store starts refusing calls for a
	// failover, when it stops (with the calls refused), and when a
	// Sentinel cannot be watched. Default slog.Default().
	Logger *slog.Logger
}

// Sentinel events that show a failover past the election of the Sentinel
// that performs it, in the order Sentinel emits them. Losses begin with
// SLAVEOF NO ONE, sent one Sentinel tick (about 50 to 100 ms, hz 10 to 19)
// after +selected-slave and two after +elected-leader; the watch starts on
// +elected-leader for the margin, and on any later one it sees first (a
// subscription that missed the first).
var failoverEvents = []string{
	"+elected-leader",
	"+failover-state-select-slave",
	"+selected-slave",
	"+failover-state-send-slaveof-noone",
	"+failover-state-wait-promotion",
	"+promoted-slave",
	"+failover-state-reconf-slaves",
}

// Channels and patterns a watcher subscribes to.
var (
	watchChannels = append([]string{"+switch-master", "+sentinel"}, failoverEvents...)
	watchPatterns = []string{"-failover-abort-*"}
)

// Sentinel's failover states (SENTINEL MASTER's failover-state) in which a
// Sentinel was elected and promotes, or has promoted, a replica.
var promotingStates = map[string]bool{
	"select_slave": true, "send_slaveof_noone": true, "wait_promotion": true,
	"reconf_slaves": true, "update_config": true,
}

// Timing of a watcher.
const (
	// pingEvery: a watcher PINGs its Sentinel after this long without a
	// message, and reconnects after three times this long.
	pingEvery = time.Second
	// sentinelTimeout bounds each command to a Sentinel, and each probe of
	// the store's server.
	sentinelTimeout = time.Second
	// Reconnection pauses double from minBackoff up to maxBackoff.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// Probes of the store's server after a failover's end are spaced by
	// pauses doubling from minProbePause up to maxProbePause.
	minProbePause = 5 * time.Millisecond
	maxProbePause = 200 * time.Millisecond
	// maxSentinels bounds the Sentinels a store watches.
	maxSentinels = 32
)

// checkSentinel checks cfg.Sentinel for New, and asks the Sentinels that
// answer within ctx whether they monitor the master and whether the
// client reaches it.
func checkSentinel(ctx context.Context, s *Store, w *SentinelWatch) []error {
	var problems []error
	if s.mode != modeSingle {
		problems = append(problems, errors.New("redis store: Sentinel is for a single-node client (redis.NewFailoverClient), not a cluster client or a Ring"))
	}
	if len(w.Addrs) == 0 {
		problems = append(problems, errors.New("redis store: Sentinel.Addrs is empty: name at least one Sentinel"))
	}
	for _, a := range w.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			problems = append(problems, fmt.Errorf("redis store: Sentinel address %q: %v", a, err))
		}
	}
	if w.MasterName == "" {
		problems = append(problems, errors.New("redis store: Sentinel.MasterName is empty"))
	}
	if w.MaxRefusal < 0 {
		problems = append(problems, errors.New("redis store: Sentinel.MaxRefusal must not be negative"))
	}
	if len(problems) > 0 {
		return problems
	}
	clientRunID := ""
	for _, a := range w.Addrs {
		sc := redis.NewSentinelClient(sentinelOptions(w, a))
		m, err := sc.Master(ctx, w.MasterName).Result()
		_ = sc.Close()
		switch {
		case err != nil && (redis.HasErrorPrefix(err, "No such master") || isUnknownCommand(err)):
			// A Sentinel that answers, and monitors no such master, or a
			// server that is no Sentinel.
			return append(problems, fmt.Errorf("redis store: Sentinel %s: SENTINEL MASTER %s: %v", a, w.MasterName, err))
		case err != nil:
			continue // unreachable: the watch retries
		}
		if strings.Contains(m["flags"], "failover_in_progress") || m["runid"] == "" {
			continue
		}
		if clientRunID == "" {
			info, err := s.client.Info(ctx, "server").Result()
			if err != nil {
				return problems
			}
			clientRunID = infoValue(info, "run_id")
		}
		if clientRunID != "" && clientRunID != m["runid"] {
			return append(problems, fmt.Errorf("redis store: the client reaches a server whose run_id is %s, but Sentinel %s names master %q at %s (run_id %s): "+
				"the store would refuse calls after every failover; create the client with redis.NewFailoverClient and this master name",
				clientRunID, a, w.MasterName, net.JoinHostPort(m["ip"], m["port"]), m["runid"]))
		}
		return problems
	}
	return problems
}

// sentinelOptions returns the options of a client of the Sentinel at addr.
func sentinelOptions(w *SentinelWatch, addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		Username:              w.Username,
		Password:              w.Password,
		TLSConfig:             w.TLSConfig,
		DialTimeout:           sentinelTimeout,
		ReadTimeout:           sentinelTimeout, // the connection's handshake; receives set their own
		WriteTimeout:          sentinelTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		PoolSize:              2,
	}
}

// infoValue returns field's value in INFO output, or "".
func infoValue(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// A watch is a Store's watch of the Sentinels of its master: a watcher
// goroutine per Sentinel, which raises the store's refusing flag while a
// failover it saw is under way.
type watch struct {
	s          *Store
	master     string
	maxRefusal time.Duration
	cfg        SentinelWatch
	log        *slog.Logger
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	refused    atomic.Int64 // calls refused since the store started refusing

	mu       sync.Mutex
	closed   bool
	watchers []*watcher
	raised   int       // watchers holding the store's calls
	since    time.Time // when the store started refusing
}

// newWatch returns the watch of w's Sentinels for s, with no watcher
// running yet (start starts them).
func newWatch(s *Store, w *SentinelWatch) *watch {
	ctx, cancel := context.WithCancel(context.Background())
	g := &watch{s: s, master: w.MasterName, maxRefusal: w.MaxRefusal, cfg: *w, log: w.Logger, ctx: ctx, cancel: cancel}
	g.cfg.Addrs = append([]string(nil), w.Addrs...)
	if g.maxRefusal == 0 {
		g.maxRefusal = DefaultMaxRefusal
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	return g
}

// start watches every Sentinel of the configuration.
func (g *watch) start() {
	for _, a := range g.cfg.Addrs {
		if w := g.add(a); w != nil {
			g.run(w)
		}
	}
}

// add makes a watcher of the Sentinel at addr, unless one exists, the
// watch is closed or watches maxSentinels already; it does not run it.
func (g *watch) add(addr string) *watcher {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || len(g.watchers) >= maxSentinels {
		return nil
	}
	for _, w := range g.watchers {
		if w.addr == addr {
			return nil
		}
	}
	sc := redis.NewSentinelClient(sentinelOptions(&g.cfg, addr))
	w := &watcher{g: g, addr: addr, sc: sc, ps: sc.Subscribe(g.ctx)}
	g.watchers = append(g.watchers, w)
	return w
}

// run runs w's goroutine.
func (g *watch) run(w *watcher) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		w.loop()
	}()
}

// discover watches the Sentinels at addrs too.
func (g *watch) discover(addrs []string) {
	for _, a := range addrs {
		if w := g.add(a); w != nil {
			g.log.Info("redis store: watching another Sentinel for failovers", "sentinel", a, "master", g.master)
			g.run(w)
		}
	}
}

// raise makes the store refuse calls for w (which was not raised).
func (g *watch) raise(w *watcher, event string) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.raised++
	first := g.raised == 1
	if first {
		g.refused.Store(0)
		g.since = time.Now()
		g.s.refusing.Store(true)
	}
	g.mu.Unlock()
	if first {
		g.log.Warn("redis store: Sentinel is failing over the master; every store call is refused (each budget applies its failure mode) until the client reaches the new master",
			"sentinel", w.addr, "master", g.master, "event", event, "old", w.oldAddr)
	}
}

// lower ends w's hold on the store's calls (w was raised); the store sends
// calls again once no watcher holds them. forced says MaxRefusal ended it.
func (g *watch) lower(w *watcher, why string, forced bool) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.raised--
	last := g.raised == 0
	var took time.Duration
	if last {
		g.s.refusing.Store(false)
		took = time.Since(g.since)
	}
	g.mu.Unlock()
	switch {
	case forced:
		g.log.Error("redis store: a Sentinel failover is not over after Sentinel.MaxRefusal; the store sends calls again, and charges the old master takes from now on may be lost",
			"sentinel", w.addr, "master", g.master, "max_refusal", g.maxRefusal, "refused", g.refused.Load())
	case last:
		g.log.Info("redis store: Sentinel failover over; the store sends calls again",
			"sentinel", w.addr, "master", g.master, "why", why, "refused", g.refused.Load(), "after", took.Round(time.Millisecond))
	}
}

// close stops every watcher and waits for them.
func (g *watch) close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	g.raised = 0
	g.s.refusing.Store(false)
	ws := g.watchers
	g.mu.Unlock()
	g.cancel()
	for _, w := range ws {
		g.mu.Lock()
		ps := w.ps
		g.mu.Unlock()
		_ = ps.Close() // ends a receive in progress
	}
	g.wg.Wait()
	for _, w := range ws {
		_ = w.sc.Close()
	}
}

// refuse counts a refused call and returns its error.
func (g *watch) refuse() error {
	g.refused.Add(1)
	return ErrFailingOver
}

// A watcher watches one Sentinel. Its fields are its goroutine's, but
// ps, which is replaced under the watch's mutex so that close can close
// it.
type watcher struct {
	g    *watch
	addr string
	sc   *redis.SentinelClient
	ps   *redis.PubSub

	raised   bool      // this watcher holds the store's calls
	settling bool      // the failover ended; waiting for the client to leave the old master
	deadline time.Time // MaxRefusal after raising
	oldAddr  string    // the master's address when raised
	oldRunID string    // the run_id of the server the client reached when raised, if known
	newAddr  string    // the new master's address, when settling
	pause    time.Duration
	failing  bool // the Sentinel cannot be reached; logged
}

// loop receives w's Sentinel's events until the watch closes.
func (w *watcher) loop() {
	ctx := w.g.ctx
	subscribe := func() {
		// The PubSub remembers its channels even when this fails, and
		// subscribes again whenever it reconnects.
		_ = w.ps.Subscribe(ctx, watchChannels...)
		_ = w.ps.PSubscribe(ctx, watchPatterns...)
	}
	subscribe()
	backoff := minBackoff
	heard := time.Now()
	pinged := false
	for ctx.Err() == nil {
		wait := pingEvery
		if w.raised {
			if w.settling {
				wait = min(wait, w.pause)
			}
			wait = max(min(wait, time.Until(w.deadline)), time.Millisecond)
		}
		msg, err := w.ps.ReceiveTimeout(ctx, wait)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !isTimeout(err) {
			w.fail(err)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			heard, pinged = time.Now(), false
			continue
		}
		if err == nil {
			heard, pinged, backoff = time.Now(), false, minBackoff
			w.receive(msg)
		} else if quiet := time.Since(heard); quiet >= 3*pingEvery {
			// No answer to the PING: the connection is dead without having
			// said so. A new PubSub reconnects and subscribes.
			w.fail(errors.New("no answer to PING"))
			if !w.renew() {
				return
			}
			subscribe()
			heard, pinged = time.Now(), false
		} else if quiet >= pingEvery && !pinged {
			_ = w.ps.Ping(ctx)
			pinged = true
		}
		w.tick()
	}
}

// renew replaces w's PubSub by a new one, which connects when used; false
// once the watch is closed.
func (w *watcher) renew() bool {
	g := w.g
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	old := w.ps
	w.ps = w.sc.Subscribe(g.ctx)
	g.mu.Unlock()
	_ = old.Close()
	return true
}

// fail notes that the Sentinel cannot be watched; the first failure of a
// spell is logged.
func (w *watcher) fail(err error) {
	if !w.failing {
		w.failing = true
		w.g.log.Warn("redis store: cannot watch a Sentinel for failovers; retrying", "sentinel", w.addr, "master", w.g.master, "error", err)
	}
}

// receive handles a message from the Sentinel.
func (w *watcher) receive(msg any) {
	switch m := msg.(type) {
	case *redis.Subscription:
		// Subscribed to everything (again): catch up on what happened
		// while not subscribed.
		if m.Count == len(watchChannels)+len(watchPatterns) {
			if w.failing {
				w.failing = false
				w.g.log.Info("redis store: watching a Sentinel for failovers again", "sentinel", w.addr, "master", w.g.master)
			}
			w.resync()
		}
	case *redis.Message:
		w.event(m.Channel, m.Payload)
	}
}

// event handles a Sentinel event with its payload.
func (w *watcher) event(channel, payload string) {
	f := strings.Fields(payload)
	switch {
	case channel == "+switch-master":
		// <name> <old ip> <old port> <new ip> <new port>
		if len(f) == 5 && f[0] == w.g.master {
			w.end(net.JoinHostPort(f[3], f[4]), channel)
		}
	case channel == "+sentinel":
		// sentinel <name> <ip> <port> @ <master> <ip> <port>
		if name, _ := masterOf(f); name == w.g.master && len(f) >= 4 {
			w.g.discover([]string{net.JoinHostPort(f[2], f[3])})
		}
	case strings.HasPrefix(channel, "-failover-abort-"):
		if name, _ := masterOf(f); name == w.g.master {
			w.end("", channel)
		}
	default:
		if name, addr := masterOf(f); name == w.g.master {
			w.raise(addr, channel)
		}
	}
}

// masterOf returns the master's name and address in an event's payload:
// "master <name> <ip> <port> ..." or "<type> <name> <ip> <port> @ <master>
// <ip> <port> ...".
func masterOf(f []string) (name, addr string) {
	switch {
	case len(f) >= 4 && f[0] == "master":
		return f[1], net.JoinHostPort(f[2], f[3])
	case len(f) >= 8 && f[4] == "@":
		return f[5], net.JoinHostPort(f[6], f[7])
	}
	return "", ""
}

// raise starts holding the store's calls for a failover of the master at
// oldAddr; a failover that starts while w waits for the client to follow
// the previous one makes it wait for this one's end instead.
func (w *watcher) raise(oldAddr, event string) {
	if w.raised {
		if w.settling {
			w.settling = false
			w.deadline = time.Now().Add(w.g.maxRefusal)
		}
		return
	}
	w.raised, w.settling = true, false
	w.deadline = time.Now().Add(w.g.maxRefusal)
	w.oldAddr, w.oldRunID = oldAddr, ""
	w.g.raise(w, event)
	// The server the client reaches now is the one it must leave. Asked
	// after raising, so the question costs no margin before the promotion.
	if id, err := w.runID(); err == nil {
		w.oldRunID = id
	}
}

// end handles the end of the failover: aborted (newAddr empty), the master
// stays; finished, the client must leave the old master before the store
// sends calls again.
func (w *watcher) end(newAddr, why string) {
	if !w.raised {
		return
	}
	if newAddr == "" || newAddr == w.oldAddr {
		w.raised = false
		w.g.lower(w, why, false)
		return
	}
	w.settling, w.newAddr, w.pause = true, newAddr, minProbePause
	w.settle()
}

// settle sends calls again once the store's client no longer reaches the
// old master; or, when the old master's run_id is unknown (it did not
// answer when the failover began), at once.
func (w *watcher) settle() {
	id, err := w.runID()
	if err == nil && (w.oldRunID == "" || id != w.oldRunID) || err != nil && w.oldRunID == "" {
		w.raised, w.settling = false, false
		w.g.lower(w, "+switch-master to "+w.newAddr, false)
		return
	}
	w.pause = min(2*w.pause, maxProbePause)
}

// tick does what is due: a probe while settling, the end of MaxRefusal.
func (w *watcher) tick() {
	if !w.raised {
		return
	}
	if time.Now().After(w.deadline) {
		w.raised, w.settling = false, false
		w.g.lower(w, "max refusal", true)
		return
	}
	if w.settling {
		w.settle()
	}
}

// runID returns the run_id of the server the store's client reaches.
func (w *watcher) runID() (string, error) {
	ctx, cancel := context.WithTimeout(w.g.ctx, sentinelTimeout)
	defer cancel()
	info, err := w.g.s.client.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	if id := infoValue(info, "run_id"); id != "" {
		return id, nil
	}
	return "", errors.New("INFO server has no run_id")
}

// resync catches up with the Sentinel's state after (re)subscribing: a
// failover under way holds the store's calls; one that ended meanwhile
// ends w's hold; and the Sentinels it knows are watched too.
func (w *watcher) resync() {
	ctx, cancel := context.WithTimeout(w.g.ctx, sentinelTimeout)
	defer cancel()
	m, err := w.sc.Master(ctx, w.g.master).Result()
	if err != nil {
		if w.g.ctx.Err() != nil {
			return // closing
		}
		w.g.log.Error("redis store: a Sentinel does not answer for the master", "sentinel", w.addr, "master", w.g.master, "error", err)
		return
	}
	addr := net.JoinHostPort(m["ip"], m["port"])
	state, inProgress := m["failover-state"], strings.Contains(m["flags"], "failover_in_progress")
	switch {
	case inProgress && (state == "" || promotingStates[state]):
		w.raise(addr, "failover-state "+state)
	case w.raised && !w.settling && !inProgress:
		w.end(addr, "SENTINEL MASTER after reconnecting")
	}
	if ss, err := w.sc.Sentinels(ctx, w.g.master).Result(); err == nil {
		var addrs []string
		for _, s := range ss {
			if s["ip"] != "" && s["port"] != "" {
				addrs = append(addrs, net.JoinHostPort(s["ip"], s["port"]))
			}
		}
		w.g.discover(addrs)
	}
}

// sleep waits for d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
