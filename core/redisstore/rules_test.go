package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
)

// maxWindow is the longest window, 2^50 µs rounded down to a millisecond;
// take.lua's MAXW is 2^50 µs.
const maxWindow = time.Duration(1<<50) * time.Microsecond / time.Millisecond * time.Millisecond

// TestScriptRulesFollowGo pins take.lua's checks to core.Limit.Validate
// and core.Item.Validate: every item Go accepts, the script evaluates; the
// items the script refuses (what would harm the server: an unknown
// algorithm, a window too short or too long for its records' tags, a
// quota that divides by zero, a negative cost) Go refuses too. Rules only
// Go applies (exactness bounds, whole milliseconds, a cost above the
// capacity) are marked goOnly: the Store never sends such an item, and the
// script does not spend time on them. Each item is sent alone (the
// script's one-item path) and beside a valid item (its general path),
// bypassing the Store's own check.
func TestScriptRulesFollowGo(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	st := mustStore(t, client, Config{Prefix: "rules:", Timeout: 5 * time.Second})
	ms := time.Millisecond
	cases := []struct {
		name   string
		l      core.Limit
		cost   int64
		goOnly bool // Go refuses it; the script need not
	}{
		{"fixed, shortest window", core.Limit{Quota: 1, Window: ms}, 1, false},
		{"window below 1 ms", core.Limit{Quota: 1, Window: 999 * time.Microsecond}, 1, false},
		{"window not whole ms", core.Limit{Quota: 1, Window: 1001 * time.Microsecond}, 1, true},
		{"longest window", core.Limit{Quota: 1, Window: maxWindow}, 1, false},
		{"window past 2^50 µs", core.Limit{Quota: 1, Window: maxWindow + ms}, 1, false},
		{"zero quota", core.Limit{Quota: 0, Window: time.Second}, 0, false},
		{"negative quota", core.Limit{Quota: -3, Window: time.Second}, 0, false},
		{"max quota", core.Limit{Quota: core.MaxQuota, Window: time.Hour}, 1, false},
		{"quota past max", core.Limit{Quota: core.MaxQuota + 1, Window: time.Hour}, 1, true},
		{"unknown algorithm", core.Limit{Algorithm: core.Concurrency + 1, Quota: 1, Window: time.Second}, 1, false},
		{"negative cost", core.Limit{Quota: 5, Window: time.Second}, -1, false},
		{"cost at capacity", core.Limit{Quota: 5, Window: time.Second}, 5, false},
		{"cost past capacity", core.Limit{Quota: 5, Window: time.Second}, 6, true},
		{"sliding at 2^53", core.Limit{Algorithm: core.SlidingWindow, Quota: 1 << 42, Window: 1024 * ms}, 1, false},
		{"sliding past 2^53", core.Limit{Algorithm: core.SlidingWindow, Quota: 1<<42 + 1, Window: 1024 * ms}, 1, true},
		{"log at max", core.Limit{Algorithm: core.SlidingLog, Quota: core.MaxSlidingLogQuota, Window: time.Second}, 1, false},
		{"log past max", core.Limit{Algorithm: core.SlidingLog, Quota: core.MaxSlidingLogQuota + 1, Window: time.Second}, 1, true},
		{"log window below 1 ms", core.Limit{Algorithm: core.SlidingLog, Quota: 1, Window: 500 * time.Microsecond}, 1, false},
		{"bucket one per µs", core.Limit{Algorithm: core.TokenBucket, Quota: 1000, Window: ms, Burst: 1}, 1, false},
		{"bucket faster than 1/µs", core.Limit{Algorithm: core.TokenBucket, Quota: 1001, Window: ms, Burst: 1}, 1, true},
		{"bucket without burst", core.Limit{Algorithm: core.TokenBucket, Quota: 1, Window: time.Second}, 0, true},
		{"bucket span at 2^50 µs", core.Limit{Algorithm: core.TokenBucket, Quota: 500, Window: ms, Burst: 1 << 49}, 1, false},
		{"bucket span past 2^50 µs", core.Limit{Algorithm: core.TokenBucket, Quota: 500, Window: ms, Burst: 1<<49 + 1}, 1, true},
		{"leaky longest wait", core.Limit{Algorithm: core.LeakyBucket, Quota: 1, Window: time.Second, Burst: 1, MaxWait: time.Duration(1<<50) * time.Microsecond}, 1, false},
		{"leaky wait past 2^50 µs", core.Limit{Algorithm: core.LeakyBucket, Quota: 1, Window: time.Second, Burst: 1, MaxWait: time.Duration(1<<50+1) * time.Microsecond}, 1, true},
	}
	valid := core.Item{Budget: "valid", Key: "v", Limit: core.Limit{Quota: 1000, Window: time.Hour}, Cost: 1}
	for i, c := range cases {
		it := core.Item{Budget: "r", Key: "k" + c.name, Limit: c.l, Cost: c.cost}
		goErr := it.Validate()
		for _, items := range [][]core.Item{{it}, {valid, it}} {
			luaErr := sendUnchecked(st, items)
			switch {
			case goErr == nil && luaErr != nil:
				t.Errorf("case %d %s (%d items): Go accepts it, the script refuses it: %v", i, c.name, len(items), luaErr)
			case goErr != nil && !c.goOnly && (luaErr == nil || !strings.Contains(luaErr.Error(), "bad limit")):
				t.Errorf("case %d %s (%d items): Go refuses it (%v), the script says %v", i, c.name, len(items), goErr, luaErr)
			case goErr == nil && c.goOnly:
				t.Errorf("case %d %s: marked Go-only, but Go accepts it", i, c.name)
			}
		}
	}
}

// sendUnchecked runs the take script on items as one decision, without
// the Store's check of the items.
func sendUnchecked(s *Store, items []core.Item) error {
	keys, blob := s.appendItems(nil, nil, items, nil, func(b []byte, i int, name string, k, lk int) []byte {
		return appendTakeItem(b, &items[i], name, k, lk)
	})
	arg := appendOneCall(nil, false, len(items), len(keys), blob)
	return s.run(context.Background(), takeFn, keys, string(arg)).Err()
}
