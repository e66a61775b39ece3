package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/internal/redistest"
	"github.com/quotagate/quotagate/internal/windowtest"
)

// TestUpgradeLeavesOldLayoutsAlone: the keys earlier versions wrote (one
// string per partition at prefix{p}, and before that one key per budget
// at prefix{p}:budget) are neither read nor changed: this version's state
// lives in the hash prefix{p}#h and starts from empty budgets, and no
// decision fails on the old keys' types.
func TestUpgradeLeavesOldLayoutsAlone(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "up:"})
	ctx := context.Background()
	const part = "tenant:42"
	oldPartition, oldBudget := "up:{tenant:42}", "up:{tenant:42}:api"
	// Values shaped like the old layouts' (a record string, a counter),
	// which would exhaust the budget if they were read.
	oldRecord := "\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00api\x00" + string(make([]byte, 32))
	if err := client.Set(ctx, oldPartition, oldRecord, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.Set(ctx, oldBudget, "3", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	windowtest.ClearOfEdge(t, time.Hour)
	for i, l := range []core.Limit{fixed(3, time.Hour), token(3, time.Hour, 3)} {
		budget := []string{"api", "bucket"}[i]
		items := []core.Item{item(budget, part, l, 1, false)}
		out := make([]core.Outcome, 1)
		for j := 0; j < 4; j++ {
			if err := st.Take(ctx, items, out); err != nil {
				t.Fatalf("%s take %d: %v", budget, j, err)
			}
			if want := j < 3; out[0].Allowed != want || (want && out[0].Remaining != int64(2-j)) {
				t.Fatalf("%s take %d: %+v; want a fresh budget of 3", budget, j, out[0])
			}
		}
	}
	if v := client.Get(ctx, oldPartition).Val(); v != oldRecord {
		t.Errorf("the old partition key changed: %q", v)
	}
	if v := client.Get(ctx, oldBudget).Val(); v != "3" {
		t.Errorf("the old budget key changed: %q", v)
	}
	for _, k := range []string{oldPartition, oldBudget} {
		if ttl := client.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s lost its TTL: %v", k, ttl)
		}
	}
	if typ := client.Type(ctx, st.Key(part)).Val(); typ != "hash" {
		t.Errorf("%s is a %s, want a hash", st.Key(part), typ)
	}
}

// TestDifferentialNoFunctions drives the store on a server without Redis
// functions (FCALL and FUNCTION renamed away, as on Redis 6), where it runs
// the same Lua as scripts by EVALSHA, against the memory store.
func TestDifferentialNoFunctions(t *testing.T) {
	srv := redistest.Start(t, noFunctionsArgs...)
	client := newClient(t, srv.Addr())
	ops := 1500
	if testing.Short() {
		ops = 300
	}
	for _, name := range []string{"mixed", "sliding_log", "fixed_window"} {
		set, ok := differentialSets[name]
		if !ok {
			t.Fatalf("no differential set %q", name)
		}
		t.Run(name, func(t *testing.T) {
			var cov coverage
			runDifferential(t, client, set, 11, ops, &cov)
			cov.check(t)
		})
	}
	if n := commandCalls(t, client, "evalsha"); n == 0 {
		t.Error("no EVALSHA ran")
	}
}

// TestDecisionReadsOnlyItsOwnBudgets: in a partition that holds 200 other
// budgets' state, a decision reads its own budget's field and the key's
// expiry (one HMGET) and writes its own field (one HSET), never the whole
// hash.
func TestDecisionReadsOnlyItsOwnBudgets(t *testing.T) {
	_, client := startServer(t)
	st := mustStore(t, client, Config{Prefix: "own:", MaxBatch: 1})
	ctx := context.Background()
	l := fixed(1000, time.Hour)
	windowtest.ClearOfEdge(t, time.Hour)
	out := make([]core.Outcome, 1)
	for i := 0; i < 200; i++ {
		if err := st.Take(ctx, []core.Item{item(fmt.Sprintf("other%03d", i), "p", l, 1, false)}, out); err != nil {
			t.Fatal(err)
		}
	}
	if n := client.HLen(ctx, st.Key("p")).Val(); n != 201 {
		t.Fatalf("the partition holds %d fields, want 200 budgets and the expiry", n)
	}
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const decisions = 10
	for i := 0; i < decisions; i++ {
		if err := st.Take(ctx, []core.Item{item("mine", "p", l, 1, false)}, out); err != nil || !out[0].Charged {
			t.Fatalf("take %d: %+v, %v", i, out[0], err)
		}
	}
	for cmd, want := range map[string]int64{"hmget": decisions, "hset": decisions, "hgetall": 0, "hkeys": 0, "hvals": 0, "get": 0} {
		if n := commandCalls(t, client, cmd); n != want {
			t.Errorf("%d decisions ran %s %d times, want %d", decisions, cmd, n, want)
		}
	}
}
