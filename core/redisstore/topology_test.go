package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	lslog "log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/observe"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/windowtest"
)

// TestNewRefusesWrongTopology: New asks the server whether it runs in
// cluster mode and refuses a client that does not match, naming the fix;
// it accepts matching clients, and servers it cannot ask.
func TestNewRefusesWrongTopology(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	plain := redistest.Start(t)

	refused := func(name string, client redis.UniversalClient, want ...string) {
		t.Helper()
		_, err := New(client, Config{})
		var ce *core.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: New returned %v, want a *core.ConfigError", name, err)
			return
		}
		if !errors.Is(err, core.ErrMisconfigured) {
			t.Errorf("%s: error %v does not wrap core.ErrMisconfigured", name, err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", name, err, w)
			}
		}
	}
	refused("single-node client on a cluster node", newClient(t, cl.Nodes[1].Addr()),
		"runs in cluster mode", cl.Nodes[1].Addr(), "single-node client", "redis.NewClusterClient", "redis.NewUniversalClient")
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": cl.Nodes[0].Addr(), "b": plain.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	refused("Ring with a cluster node", ring, "Ring", cl.Nodes[0].Addr(), "redis.NewClusterClient")
	refused("cluster client on a plain server", newClusterClient(t, []string{plain.Addr()}),
		"cluster support disabled", "redis.NewClient")

	if _, err := New(newClient(t, plain.Addr()), Config{}); err != nil {
		t.Errorf("single-node client on a plain server: %v", err)
	}
	if _, err := New(newClusterClient(t, cl.Addrs()), Config{}); err != nil {
		t.Errorf("cluster client on a cluster: %v", err)
	}
	// A server that cannot be asked is not refused: the store then fails
	// (or works) as it would without the check, and New is bounded.
	for _, addr := range []string{redistest.Blackhole(t), deadAddr(t)} {
		start := time.Now()
		if _, err := New(newClient(t, addr), Config{}); err != nil {
			t.Errorf("unreachable server %s: New refused it: %v", addr, err)
		}
		// 2 s of slack for a loaded machine; go-redis's 5 s dial timeout,
		// which an unbounded check would wait out, still shows.
		if d := time.Since(start); d > topologyCheckTimeout+2*time.Second {
			t.Errorf("unreachable server %s: New took %v, want at most about %v", addr, d, topologyCheckTimeout)
		}
	}
}

// deadAddr returns the address of a server that was killed.
func deadAddr(t *testing.T) string {
	srv := redistest.Start(t)
	srv.Kill()
	return srv.Addr()
}

// TestMisconfiguredAtRunTime: when a single-node client ends up on a
// cluster node anyway (the server became a cluster after start-up, or INFO
// could not be asked), MOVED and CROSSSLOT replies are store errors that
// wrap core.ErrMisconfigured and name the fix; the engine applies the
// budget's failure mode, metrics count them under
// store_errors_total{kind="misconfigured"}, and the logger writes one
// line at level ERROR, once.
func TestMisconfiguredAtRunTime(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	plain := redistest.Start(t)
	st := mustStore(t, newClient(t, plain.Addr()), Config{Prefix: "misconf:"})
	// What New would have refused: a single-node client on node 0.
	node0 := newClient(t, cl.Nodes[0].Addr())
	st.client = node0

	cc := newClusterClient(t, cl.Addrs())
	owner := func(partition string) string {
		t.Helper()
		slot := slotOf(partition)
		slots, err := cc.ClusterSlots(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slots {
			if slot >= s.Start && slot <= s.End {
				return s.Nodes[0].Addr
			}
		}
		t.Fatalf("slot %d has no owner", slot)
		return ""
	}
	var mine, other []string // partitions on node 0, and elsewhere
	for i := 0; len(mine) < 2 || len(other) < 1; i++ {
		p := fmt.Sprintf("p%d", i)
		if owner(p) == cl.Nodes[0].Addr() {
			mine = append(mine, p)
		} else {
			other = append(other, p)
		}
	}
	l := fixed(5, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	ctx := context.Background()
	out := make([]core.Outcome, 2)

	// A key this node owns works: the misconfiguration is partial, which
	// is what makes it easy to miss.
	if err := st.Take(ctx, []core.Item{item("a", mine[0], l, 1, false)}, out); err != nil {
		t.Fatalf("key on node 0: %v", err)
	}
	for _, c := range []struct {
		name  string
		items []core.Item
		reply string
	}{
		{"MOVED", []core.Item{item("a", other[0], l, 1, false)}, "MOVED"},
		{"CROSSSLOT", []core.Item{item("a", mine[0], l, 1, false), item("a", mine[1], l, 1, false)}, "CROSSSLOT"},
	} {
		err := st.Take(ctx, c.items, out)
		if !errors.Is(err, core.ErrMisconfigured) {
			t.Errorf("%s: err = %v, want one wrapping core.ErrMisconfigured", c.name, err)
			continue
		}
		for _, w := range []string{"redis store: take: misconfigured", c.reply, "redis.NewClusterClient"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
		// The engine adds the one prefix when it reports the error.
		reported := (&core.StoreError{Op: "take", Err: err}).Error()
		if !strings.HasPrefix(reported, "quotagate: redis store: take: misconfigured") || strings.Count(reported, "quotagate:") != 1 {
			t.Errorf("%s: reported as %q, want one prefix", c.name, reported)
		}
	}
	if mine[0] == mine[1] || slotOf(mine[0]) == slotOf(mine[1]) {
		t.Log("both node-0 partitions share a slot; the CROSSSLOT case may have passed by luck")
	}

	// Through an engine with both observers.
	var logs bytes.Buffer
	logger := observe.MustLogger(lslog.New(lslog.NewJSONHandler(&logs, nil)), observe.LoggerConfig{})
	kinds := &errObserver{}
	eng := core.MustNew(core.Config{
		Store:            st,
		Observer:         observe.Multi(logger, kinds),
		BreakerThreshold: -1,
		Budgets: []core.Budget{{Name: "api", Quota: 5, Window: time.Hour,
			Key: func(*core.Request) (string, error) { return other[0], nil }}},
	})
	layer := eng.MustLayer(core.Use("api"))
	const n = 4
	for i := 0; i < n; i++ {
		d := new(core.Decision)
		layer.Decide(&core.Request{Method: "GET"}, d)
		if !d.Allowed || !errors.Is(d.Err, core.ErrMisconfigured) || !d.Results[0].FailedOpen {
			t.Errorf("decision %d: allowed %v err %v; want failed open with a misconfiguration error", i, d.Allowed, d.Err)
		}
	}
	if got := kinds.byKind[core.KindStoreMisconfigured].Load(); got != n {
		t.Errorf("observed %d errors of kind %v, want %d", got, core.KindStoreMisconfigured, n)
	}
	if got := kinds.byKind[core.KindStoreError].Load(); got != 0 {
		t.Errorf("observed %d errors of kind %v, want 0: misconfiguration is its own kind", got, core.KindStoreError)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"ERROR"`) || !strings.Contains(lines[0], `"event":"store_misconfigured"`) ||
		!strings.Contains(lines[0], "MOVED") || !strings.Contains(lines[0], "redis.NewClusterClient") {
		t.Errorf("log after %d misconfigured decisions, want one ERROR line naming MOVED and the fix:\n%s", n, logs.String())
	}
	logs.Reset()
	if got := logger.Flush(); got != n-1 {
		t.Errorf("Flush reported %d suppressed lines, want %d", got, n-1)
	}
	if !strings.Contains(logs.String(), `"event":"store_misconfigured"`) || !strings.Contains(logs.String(), `"suppressed":3`) {
		t.Errorf("Flush wrote %q, want the suppressed store_misconfigured count", logs.String())
	}
}

func TestClassify(t *testing.T) {
	if err := classify(redis.ErrCrossSlot); !errors.Is(err, core.ErrMisconfigured) || !errors.Is(err, redis.ErrCrossSlot) {
		t.Errorf("CROSSSLOT: %v", err)
	}
	for _, err := range []error{context.DeadlineExceeded, errors.New("MOVED is not a prefix of a plain error"), redis.ErrNoScript, nil} {
		if got := classify(err); got != err {
			t.Errorf("classify(%v) = %v, want it unchanged", err, got)
		}
	}
	// Classifying twice wraps once.
	once := classify(redis.ErrCrossSlot)
	if twice := classify(once); twice != once {
		t.Errorf("classify wrapped a misconfiguration again: %v", twice)
	}
}
