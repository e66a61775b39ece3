package redisstore

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
)

func TestDbgCluster(t *testing.T) {
	if os.Getenv("DBG") == "" {
		t.Skip()
	}
	cl := redistest.StartCluster(t, 3)
	client := newClusterClient(t, cl.Addrs())
	clock := newFakeClock(t0)
	red := mustStore(t, client, Options{Clock: clock, Timeout: 5 * time.Second})
	mem := core.MustMemoryStore(core.MemoryConfig{Clock: clock, SweepInterval: -1})
	ctx := context.Background()
	fa := fixed(3, time.Second)
	fc := fixed(1000, time.Hour)
	take := func(items ...core.Item) {
		mo := make([]core.Outcome, len(items))
		ro := make([]core.Outcome, len(items))
		mem.Take(ctx, items, mo)
		if err := red.Take(ctx, items, ro); err != nil {
			t.Fatal(err)
		}
		for i := range items {
			t.Logf("%s/%s cost %d shadow %v\n mem %+v\n red %+v", items[i].Budget, items[i].Key, items[i].Cost, items[i].Shadow, mo[i], ro[i])
		}
		for i := range items {
			t.Logf("key %s = %q", items[i].Key, client.Get(ctx, red.Key(items[i].Budget, items[i].Key)).Val())
		}
	}
	take(item("fa", "a", fa, 3, false))
	take(item("fc", "b", fc, 1, true), item("fa", "a", fa, 1, false))
	take(item("fc", "b", fc, 1, true), item("fa", "a", fa, 1, false))
	take(item("fc", "b", fc, 0, true))
}
