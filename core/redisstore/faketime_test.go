package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/redis/go-redis/v9"
)

// The tests' clock. Production scripts read the Redis server's TIME and
// nothing on the wire carries a time; tests that drive the store with a
// fake clock run a test build of the function library instead, in which
// the clock section of algorithms.lua is replaced by one that the test
// sets on every call. The algorithms, take and refund are the production
// code, byte for byte, so the differential tests compare what production
// runs.

// prodClock is the clock section of algorithms.lua, which the test library
// replaces.
var prodClock = func() string {
	i := strings.Index(algorithmsLua, "local MINTTL = 0\n")
	j := strings.Index(algorithmsLua, "-- end of the clock\n")
	if i < 0 || j < i {
		panic("algorithms.lua: clock section not found")
	}
	return algorithmsLua[i:j]
}()

// fakeClockLua is the tests' clock section: now and the TTL floor are
// what the wrapper functions below were given last.
const fakeClockLua = `local MINTTL = 0
local FAKENOW = 0
local function fakeclock(now, minttl)
  FAKENOW, MINTTL = tonumber(now), tonumber(minttl)
end
local function servertime()
  return FAKENOW
end
`

var (
	fakeTake   = "quotagate_take_fake_" + libVersion
	fakeRefund = "quotagate_refund_fake_" + libVersion
	// fakeLibrary is the production library with the tests' clock, and
	// functions that take the time and TTL floor after the production
	// arguments.
	fakeLibrary = "#!lua name=quotagate_fake_" + libVersion + "\n" +
		fakeAlgorithms + "\n" + takeLua + "\n" + refundLua + `
redis.register_function('` + fakeTake + `', function(KEYS, ARGV)
  fakeclock(ARGV[#ARGV - 1], ARGV[#ARGV])
  return take(KEYS, ARGV)
end)
redis.register_function('` + fakeRefund + `', function(KEYS, ARGV)
  fakeclock(ARGV[#ARGV - 1], ARGV[#ARGV])
  return refund_run(KEYS, ARGV)
end)
`
)

// fakeAlgorithms is algorithms.lua with the tests' clock.
var fakeAlgorithms = strings.Replace(algorithmsLua, prodClock, fakeClockLua, 1)

// The test scripts, for servers without functions (EVALSHA and EVAL).
var (
	fakeTakeScript   = newScriptFn("", fakeAlgorithms+"\n"+takeLua+"\nfakeclock(ARGV[#ARGV - 1], ARGV[#ARGV])\nreturn take(KEYS, ARGV)\n")
	fakeRefundScript = newScriptFn("", fakeAlgorithms+"\n"+refundLua+"\nfakeclock(ARGV[#ARGV - 1], ARGV[#ARGV])\nreturn refund_run(KEYS, ARGV)\n")
)

// useFakeTime makes every store on client run at clock's time instead of
// the server's until the test ends, with TTLs of at least minTTL (a fake
// clock that stands still while real time passes must not see keys expire
// in real time). It redirects the client's FCALLs of the store's functions
// to the test library's, with the time appended to their arguments. A
// later call for the same client replaces the clock.
func useFakeTime(t testing.TB, client redis.UniversalClient, clock core.Clock, minTTL time.Duration) {
	t.Helper()
	if err := loadFakeLibrary(context.Background(), client); err != nil {
		t.Fatalf("loading the test library: %v", err)
	}
	h, loaded := fakeHooks.LoadOrStore(client, &fakeTimeHook{})
	hook := h.(*fakeTimeHook)
	if !loaded {
		client.AddHook(hook)
	}
	hook.set.Store(&fakeTime{clock: clock, minTTL: minTTL})
	t.Cleanup(func() { hook.set.Store(nil) })
}

// loadFakeLibrary loads the test library on every server of client; a
// server without functions runs the test scripts instead, which the
// client loads itself (EVALSHA, then EVAL).
func loadFakeLibrary(ctx context.Context, client redis.UniversalClient) error {
	load := func(ctx context.Context, c *redis.Client) error {
		err := c.FunctionLoad(ctx, fakeLibrary).Err()
		if err == nil || strings.Contains(err.Error(), "already exists") || isUnknownCommand(err) {
			return nil
		}
		return err
	}
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, load)
	case *redis.Ring:
		return c.ForEachShard(ctx, load)
	case *redis.Client:
		return load(ctx, c)
	}
	return errors.New("unknown client type")
}

// fakeHooks holds the hook of every client useFakeTime has seen.
var fakeHooks sync.Map

type fakeTime struct {
	clock  core.Clock
	minTTL time.Duration
}

// fakeTimeHook redirects a client's FCALLs to the test library while set
// holds a time source.
type fakeTimeHook struct{ set atomic.Pointer[fakeTime] }

func (*fakeTimeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *fakeTimeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ft := h.set.Load()
		if ft == nil {
			return next(ctx, cmds)
		}
		fakes := make([]redis.Cmder, len(cmds))
		for i, cmd := range cmds {
			fakes[i] = cmd
			if fc := ft.rewrite(ctx, cmd); fc != nil {
				fakes[i] = fc
			}
		}
		err := next(ctx, fakes)
		for i, cmd := range cmds {
			if fc, ok := fakes[i].(*redis.Cmd); ok && fakes[i] != cmd {
				cmd.(*redis.Cmd).SetVal(fc.Val())
				cmd.SetErr(fc.Err())
			}
		}
		return err
	}
}

func (h *fakeTimeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ft := h.set.Load()
		if ft == nil {
			return next(ctx, cmd)
		}
		fc := ft.rewrite(ctx, cmd)
		if fc == nil {
			return next(ctx, cmd)
		}
		err := next(ctx, fc)
		if isFunctionMissing(err) { // a test flushed the functions
			if err = next(ctx, redis.NewCmd(ctx, "function", "load", fakeLibrary)); err == nil {
				fc = ft.rewrite(ctx, cmd)
				err = next(ctx, fc)
			}
		}
		cmd.(*redis.Cmd).SetVal(fc.Val())
		cmd.SetErr(err)
		return err
	}
}

// rewrite returns the test library's version of cmd, a call of the store's
// take or refund, with the time appended; nil for any other command.
func (ft *fakeTime) rewrite(ctx context.Context, cmd redis.Cmder) *redis.Cmd {
	args := cmd.Args()
	if _, ok := cmd.(*redis.Cmd); !ok || len(args) < 3 {
		return nil
	}
	var to any
	switch {
	case args[0] == "fcall" && args[1] == takeFn.name:
		to = fakeTake
	case args[0] == "fcall" && args[1] == refundFn.name:
		to = fakeRefund
	case args[0] == "evalsha" && args[1] == takeFn.script.Hash():
		to = fakeTakeScript.script.Hash()
	case args[0] == "evalsha" && args[1] == refundFn.script.Hash():
		to = fakeRefundScript.script.Hash()
	case args[0] == "eval" && args[1] == takeFn.src:
		to = fakeTakeScript.src
	case args[0] == "eval" && args[1] == refundFn.src:
		to = fakeRefundScript.src
	default:
		return nil
	}
	fake := append([]any{args[0], to}, args[2:]...)
	fake = append(fake, ft.clock.Now().UnixMicro(), ft.minTTL.Milliseconds())
	return redis.NewCmd(ctx, fake...)
}

// wireHook shows a test every take script run as it went over the wire:
// see recordBatches.
type wireHook struct {
	seen func(keys []string, call string, reply string)
}

func (wireHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (wireHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h wireHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err != nil || len(args) < 4 || args[0] != "fcall" || args[1] != takeFn.name {
			return err
		}
		n := int(args[2].(int))
		keys := make([]string, n)
		for i := range keys {
			keys[i] = args[3+i].(string)
		}
		call := args[3+n]
		var s string
		switch v := call.(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		}
		reply, _ := cmd.(*redis.Cmd).Text()
		h.seen(keys, s, reply)
		return err
	}
}
