package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/windowtest"
	"github.com/redis/go-redis/v9"
)

// TestDeadlineIsATimeout: a call that runs out of the store's deadline
// while Redis does not answer is a store_timeout, whichever way go-redis
// notices it. With ContextTimeoutEnabled, go-redis sets the socket's
// deadline to the call's, and the read then fails with a net timeout
// ("read tcp ...: i/o timeout") rather than the context's error; the
// store must not report that as a plain store_error, which logs and
// metrics would show as Redis failing rather than answering late.
func TestDeadlineIsATimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis servers")
	}
	const timeout = 100 * time.Millisecond
	l := fixed(10, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	check := func(t *testing.T, st *Store, pause func()) {
		t.Helper()
		ctx := context.Background()
		items := []core.Item{item("b", "k", l, 1, false)}
		out := make([]core.Outcome, 1)
		if err := st.Take(ctx, items, out); err != nil || !out[0].Charged {
			t.Fatalf("take before the pause: err %v, %+v", err, out[0])
		}
		charged := out[0]
		pause()
		calls := map[string]func() error{
			"take":   func() error { return st.Take(ctx, items, make([]core.Outcome, 1)) },
			"refund": func() error { return st.Refund(ctx, items, []core.Outcome{charged}) },
			"peek":   func() error { return st.Peek(ctx, items, make([]core.Outcome, 1)) },
		}
		for _, op := range []string{"take", "refund", "peek"} {
			err := calls[op]()
			if err == nil {
				t.Fatalf("%s succeeded while Redis was paused", op)
			}
			if kind := core.ClassifyStoreError(err); kind != core.KindStoreTimeout || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: err = %v, kind %v; want store_timeout, matching context.DeadlineExceeded", op, err, kind)
			}
		}
	}

	t.Run("single", func(t *testing.T) {
		srv, client := startServer(t)
		st := mustStore(t, client, Config{Prefix: "to:", Timeout: timeout})
		check(t, st, func() { srv.CLI("CLIENT", "PAUSE", "3000", "ALL") })
	})

	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		cc := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 cl.Addrs(),
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
		})
		t.Cleanup(func() { cc.Close() })
		st := mustStore(t, cc, Config{Prefix: "to:", Timeout: timeout})
		check(t, st, func() {
			for _, n := range cl.Nodes {
				n.CLI("CLIENT", "PAUSE", "3000", "ALL")
			}
		})
	})
}
