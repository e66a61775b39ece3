// Package benchengine is the engine the adapters' benchmarks share.
package benchengine

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/keyfunc"
)

// HotEngine returns an engine on a memory store for adapter benchmarks:
// two budgets, "per_ip" and "writes", keyed by keyfunc.PeerIP, with quotas
// no benchmark exhausts, and the given header style. The store is closed
// when tb ends.
func HotEngine(tb testing.TB, style core.HeaderStyle) *core.Engine {
	tb.Helper()
	s := memstore.MustNew(memstore.Config{SweepInterval: -1})
	tb.Cleanup(func() { _ = s.Close() })
	return core.MustNew(core.Config{Store: s, Headers: style, Budgets: []core.Budget{
		{Name: "per_ip", Quota: 1e12, Window: time.Hour, Key: keyfunc.PeerIP()},
		{Name: "writes", Quota: 1e12, Window: time.Hour, Key: keyfunc.PeerIP()},
	}})
}
