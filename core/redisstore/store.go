package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/redis/go-redis/v9"
)

//go:embed algorithms.lua
var algorithmsLua string

//go:embed take.lua
var takeLua string

//go:embed refund.lua
var refundLua string

//go:embed lease.lua
var leaseLua string

//go:embed peek.lua
var peekLua string

// A scriptFn is one of the store's entry points, take, refund and lease: a
// function of the store's Redis function library, and the same Lua as a
// script for servers without functions.
type scriptFn struct {
	name    string // the function's name in the library
	nameArg any    // name, boxed once for runTake
	src     string // the script's source
	script  *redis.Script
}

func newScriptFn(name, src string) *scriptFn {
	return &scriptFn{name: name, nameArg: name, src: src, script: redis.NewScript(src)}
}

// libVersion names the library and its functions after a hash of their
// code, so that stores of different versions sharing a server each call
// their own (a library is never replaced).
var libVersion = func() string {
	sum := sha1.Sum([]byte(algorithmsLua + "\x00" + takeLua + "\x00" + refundLua + "\x00" + leaseLua + "\x00" + peekLua))
	return hex.EncodeToString(sum[:8])
}()

var (
	takeFn   = newScriptFn("quotagate_take_"+libVersion, algorithmsLua+"\n"+takeLua+"\nreturn take(KEYS, ARGV)\n")
	refundFn = newScriptFn("quotagate_refund_"+libVersion, algorithmsLua+"\n"+refundLua+"\nreturn refund_run(KEYS, ARGV)\n")
	leaseFn  = newScriptFn("quotagate_lease_"+libVersion, algorithmsLua+"\n"+leaseLua+"\nreturn lease_run(KEYS, ARGV)\n")
	peekFn   = newScriptFn("quotagate_peek_"+libVersion, algorithmsLua+"\n"+takeLua+"\n"+peekLua+"\nreturn peek_run(KEYS, ARGV)\n")
	// library is the Redis function library holding them (FUNCTION LOAD).
	// Its top level, which defines the algorithms, runs once when it is
	// loaded; a script's runs on every call.
	library = "#!lua name=quotagate_" + libVersion + "\n" + algorithmsLua + "\n" + takeLua + "\n" + refundLua + "\n" + leaseLua + "\n" + peekLua +
		"\nredis.register_function('" + takeFn.name + "', take)\nredis.register_function('" + refundFn.name + "', refund_run)\n" +
		"redis.register_function('" + leaseFn.name + "', lease_run)\n" +
		"redis.register_function{function_name='" + peekFn.name + "', callback=peek_run, flags={'no-writes'}}\n"
)

// DefaultPrefix starts every key unless [Config.Prefix] says otherwise.
const DefaultPrefix = "quotagate:"

// DefaultTimeout bounds every store call unless [Config.Timeout] says
// otherwise.
const DefaultTimeout = 50 * time.Millisecond

// maxItems caps the items of one Take or Refund (core applies at most
// core.MaxBudgetsPerLayer per layer).
const maxItems = 64

// Config configures a [Store]. The zero value is usable.
type Config struct {
	// Prefix starts every key, e.g. "myapp:rl:". It must not contain '{'
	// or '}', which would change the keys' hash tags. Default
	// DefaultPrefix.
	Prefix string

	// Timeout bounds every Take and Refund, whatever the request's context
	// says: a cancelled request still completes its store call, and a slow
	// or unreachable Redis costs at most Timeout (then the engine applies
	// the budget's failure mode). Default DefaultTimeout (50 ms). It
	// bounds the server's answer to each script run, a batch's included,
	// not a Take's wait in the batch queue: a queued Take waits while the
	// server keeps answering runs, and fails once none has been answered
	// for Timeout (see the package documentation, Batching). A run on a
	// new connection (the first, or one after a restart, a failover or a
	// timeout that closed the last) also pays for the connection's
	// handshake within Timeout: a dial and HELLO, and go-redis's CLIENT
	// SETINFO unless the client disables identity (one from [Open] or
	// [Addr.Open] does). So Timeout must span three round trips to the
	// server at least; below that, calls on new connections time out,
	// each timeout closes its connection, and the store keeps failing
	// while the server answers. A negative Timeout disables the store's
	// own deadline; the client's timeouts then apply.
	//
	// go-redis applies a context's deadline to socket reads and writes only
	// when the client was created with ContextTimeoutEnabled, so [New]
	// requires it unless Timeout is negative.
	Timeout time.Duration

	// MaxBatch bounds how many decisions one run carries: one script run
	// on a single server (a *redis.Client, Sentinel's failover client
	// included) or on a Ring's shard, one round trip to a cluster's master
	// (a script run per hash slot, pipelined); each decision is evaluated
	// on its own, as if sent alone. Default DefaultMaxBatch (64); 1 turns
	// batching off, so that every Take is its own script run. A cluster
	// client batches the Takes whose items all lie in one hash slot, a
	// Ring those whose items all lie on one shard. When Takes
	// queue and how a batch goes out: the package documentation, Batching.
	MaxBatch int

	// Lazy makes [Open] and [Addr.Open] return without asking the server.
	// By default they check that it answers PING, with the address's
	// credentials and database (every master of a cluster), within the
	// dial timeout plus two seconds, and return an error that names the
	// address otherwise: a mistyped address or password is then an error
	// at start-up, not a store whose every call fails. With Lazy, a
	// server that does not answer is no error (calls fail until it does);
	// one that answers is still checked for its topology, as [New] does.
	Lazy bool

	// Observer, when it implements [core.LeaseObserver], is told what the
	// store's leases do (see the package documentation, Leases). Pass the
	// engine's observer (a metrics.Metrics, or observe.Multi of several).
	// Optional; other observers are ignored.
	Observer core.Observer

	// Sentinel, for a client made by redis.NewFailoverClient, names the
	// Sentinels of its master: the store then watches them and refuses
	// every call with [ErrFailingOver] while one of them fails the master
	// over, until the client reaches the new master, so that the charges
	// the old master would take and lose are never acknowledged (see
	// [SentinelWatch], and the package documentation, Planned Sentinel
	// failovers). Call [Store.Close] to stop watching. Optional: nil
	// watches nothing. For a single-node client only.
	Sentinel *SentinelWatch
}

// mode is how a Store spreads keys over servers.
type mode int

const (
	modeSingle  mode = iota // one server (a Client, or a Sentinel failover client)
	modeCluster             // Redis Cluster: one script per hash slot
	modeRing                // go-redis Ring: one script per hash tag
)

// Store is a [core.Store] in Redis. It is safe for concurrent use by any
// number of engines and processes: they share every budget.
type Store struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient
	ring    *redis.Ring
	mode    mode
	prefix  string
	timeout time.Duration
	// batch gathers concurrent Takes on a single server; nil when
	// batching is off or the client spreads keys over servers.
	batch *batcher
	// gate is the run limit of every batcher of the store (nil when it
	// does not batch): one limit, per server, measured over all their
	// decisions.
	gate *runGate
	// nodeBatchers gathers, on a cluster with batching on, the concurrent
	// Takes of each master: a *batcher per master's *redis.Client, made
	// at its first Take, whose runs hold one script run per hash slot.
	nodeBatchers sync.Map
	// ringBatchers gathers, on a Ring with batching on, the concurrent
	// Takes of each shard: a *batcher per shard's *redis.Client, made at
	// its first Take.
	ringBatchers sync.Map
	// maxBatch is Config.MaxBatch, for the slots' and shards' batchers.
	maxBatch int
	// noFunctions is set once a server refused FCALL or FUNCTION LOAD as
	// an unknown command (Redis before 7.0, or a renamed command): the
	// store then runs its scripts by EVALSHA.
	noFunctions atomic.Bool
	// leases holds the leases this store took for budgets that lease.
	leases *leaser
	// epoch is when the store was made: its monotonic clock reads are
	// durations since it. nextReload (since epoch) paces the slot map
	// reloads failed calls ask of a cluster client (see reloadAfter).
	epoch      time.Time
	nextReload atomic.Int64
	// shards numbers a cluster's masters (*redis.Client → int) for Shard,
	// in the order it meets them; nShards counts them.
	shards  sync.Map
	nShards atomic.Int64
	// refusing is set while a Sentinel fails the master over (see
	// SentinelWatch); every script run then fails with ErrFailingOver.
	// watch is nil without Config.Sentinel.
	refusing atomic.Bool
	watch    *watch
}

var _ core.ShardedStore = (*Store)(nil)

// canceled is a context already canceled: Shard's, so that reading the
// cluster client's slot map never waits on the network.
var canceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// Shard implements [core.ShardedStore]: on a cluster, the master that
// holds the hash slot of every item's partition (numbered in the order
// the store meets them, modulo core.MaxShards), so that the engine's
// circuit breaker opens for a failing master's keys alone; -1 when the
// items are on several masters, and on a single server, Sentinel or a
// Ring. A master promoted in a failover is a new shard, with a closed
// breaker. It reads the cluster client's slot map and never waits: before
// the client has one (a store opened lazily on servers that do not
// answer), it returns -1, and the Take's own call loads the map within
// the store's deadline.
func (s *Store) Shard(items []core.Item) int {
	if s.cluster == nil || len(items) == 0 {
		return -1
	}
	var node *redis.Client
	for i := range items {
		// A partition's tag holds no brace, so it hashes to its slot. With
		// a canceled context, a client without a slot map fails at once
		// instead of loading it here, outside any deadline.
		n, err := s.cluster.MasterForKey(canceled, partitionTag(items[i].Key))
		if err != nil || node != nil && n != node {
			return -1
		}
		node = n
	}
	if v, ok := s.shards.Load(node); ok {
		return v.(int)
	}
	v, _ := s.shards.LoadOrStore(node, int(s.nShards.Add(1)-1)%core.MaxShards)
	return v.(int)
}

// New returns a Store using client: a *redis.Client (single node, or
// Sentinel through redis.NewFailoverClient), a *redis.ClusterClient or a
// *redis.Ring. Scripts are loaded on first use.
//
// New asks the servers whether they run in cluster mode (INFO cluster,
// bounded by 2 seconds) and refuses a client that does not match: a
// single-node client or a Ring on a cluster-enabled server (every key
// outside that node's hash slots would be answered MOVED), or a cluster
// client on servers without cluster support; the error names the client to
// create instead. A server that does not answer, or refuses INFO, is not
// refused; a wrong topology then shows at run time as store errors that
// wrap [core.ErrMisconfigured].
//
// On a *redis.ClusterClient, a call that fails without a reply from Redis
// (a connection refused or reset, a timeout) makes the client re-read the
// cluster's slot map, at most once per 250 ms per Store, so that a dead
// master's keys follow its promoted replica whatever the client's
// ClusterStateReloadInterval (see the package documentation, Redis
// Cluster).
//
// With [Config.Sentinel], New also checks the watch, asking the Sentinels
// within 2 seconds more (see [SentinelWatch]), and starts watching them
// when it returns a Store.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	var problems []error
	if client == nil {
		problems = append(problems, errors.New("redis store: no client"))
	}
	if cfg.MaxBatch < 0 {
		problems = append(problems, errMaxBatch)
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		problems = append(problems, fmt.Errorf("redis store: prefix %q contains '{' or '}', which would change the keys' hash tags", cfg.Prefix))
	}
	s := &Store{client: client, prefix: cfg.Prefix, timeout: cfg.Timeout, epoch: time.Now()}
	cte := true
	switch c := client.(type) {
	case *redis.Client:
		cte = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		s.mode, s.cluster = modeCluster, c
		cte = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		s.mode, s.ring = modeRing, c
		cte = c.Options().ContextTimeoutEnabled
	}
	s.leases = newLeaser(s, cfg.Observer)
	s.maxBatch = cfg.MaxBatch
	if cfg.MaxBatch > 1 {
		s.gate = newRunGate(client)
		if s.mode == modeSingle {
			s.batch = s.newBatcher()
			s.gate.join()
		}
	}
	if !cte && cfg.Timeout > 0 {
		problems = append(problems, errors.New("redis store: the client ignores context deadlines, so the store's timeout would not bound its calls; "+
			"create the client with ContextTimeoutEnabled: true (or set Config.Timeout negative to rely on the client's own timeouts)"))
	}
	if len(problems) == 0 {
		if err := checkTopology(s); err != nil {
			problems = append(problems, err)
		}
	}
	if cfg.Sentinel != nil && len(problems) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), topologyCheckTimeout)
		problems = append(problems, checkSentinel(ctx, s, cfg.Sentinel)...)
		cancel()
	}
	if len(problems) > 0 {
		return nil, &core.ConfigError{Problems: problems}
	}
	if cfg.Sentinel != nil {
		s.watch = newWatch(s, cfg.Sentinel)
		s.watch.start()
	}
	return s, nil
}

// Key returns the Redis key holding the state of every budget of
// partition, a hash: prefix + "{" + partition + "}#h", with partitions that are long
// or hold bytes other than letters, digits and "-._:/@=+" replaced by '#'
// and a hash. A sliding log keeps its entries in a key of its own,
// [Store.LogKey]. The braces make every key of one partition share a hash
// slot in Redis Cluster.
func (s *Store) Key(partition string) string {
	k, _, _ := partitionKey(s.prefix, partition)
	return k
}

// LogKey returns the Redis key holding the entries of budget's sliding log
// for partition: prefix + "{" + partition + "}:" + budget, with partition
// written as in [Store.Key].
func (s *Store) LogKey(budget, partition string) string {
	k, _, _ := buildKey(s.prefix, partition, budget)
	return k
}

// Preload loads the store's function library (or, on servers without
// Redis functions, its scripts) on every server (every master of a
// cluster), so that the first decisions do not pay for it. Calls load it
// anyway when a server lacks it (after a restart without persistence, a
// FUNCTION FLUSH or SCRIPT FLUSH, or a failover to a server that never
// had it).
func (s *Store) Preload(ctx context.Context) error {
	rc := s.callContext(ctx)
	defer rc.release()
	ctx = rc
	return s.loadScripts(ctx)
}

func (s *Store) loadScripts(ctx context.Context) error {
	load := func(ctx context.Context, c *redis.Client) error { return s.loadOn(ctx, c) }
	switch s.mode {
	case modeCluster:
		return s.cluster.ForEachMaster(ctx, load)
	case modeRing:
		return s.ring.ForEachShard(ctx, load)
	}
	return s.loadOn(ctx, s.client)
}

// loadOn loads the library on one server, or the scripts when the server
// has no functions.
func (s *Store) loadOn(ctx context.Context, c redis.Cmdable) error {
	if !s.noFunctions.Load() {
		err := c.FunctionLoad(ctx, library).Err()
		if err == nil || redis.HasErrorPrefix(err, "Library ") && strings.HasSuffix(err.Error(), "already exists") {
			return nil
		}
		if !isUnknownCommand(err) {
			return err
		}
		s.noFunctions.Store(true)
	}
	for _, fn := range []*scriptFn{takeFn, refundFn, leaseFn} {
		if err := c.ScriptLoad(ctx, fn.src).Err(); err != nil {
			return err
		}
	}
	return nil
}

// isUnknownCommand reports whether err is a server's answer to a command
// it does not know.
func isUnknownCommand(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "unknown command")
}

// isFunctionMissing reports whether err says the server lacks the
// function called.
func isFunctionMissing(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "Function not found")
}

// reloadEvery is the least time between two slot map reloads a Store
// asks of its cluster client after failed calls: a quarter of a second
// adds little to the seconds a failover takes, and caps what a Store asks
// at four CLUSTER SLOTS a second however many calls fail.
const reloadEvery = 250 * time.Millisecond

// reloadAfter asks a cluster client to re-read the cluster's slot map
// (ReloadState: one CLUSTER SLOTS, sent by go-redis in the background, and
// not again while one is in flight) when a call failed without a reply
// from Redis: a connection refused or reset, or a timeout. go-redis
// re-reads the map on MOVED, ASK and READONLY replies and every
// ClusterStateReloadInterval (60 s by default), not when a connection
// fails; without this, a client would keep sending a dead master's keys
// to it after its replica took over. A reply from Redis (a script's error,
// OOM, CLUSTERDOWN) says nothing of the map. Reloads are paced: at most
// one per reloadEvery per Store, so failing calls cost one time check each
// and never a reload each. Only failed calls get here.
func (s *Store) reloadAfter(err error) {
	if s.cluster == nil {
		return
	}
	if answered(err) || errors.Is(err, redis.ErrClosed) {
		return
	}
	now, next := int64(time.Since(s.epoch)), s.nextReload.Load()
	if now < next || !s.nextReload.CompareAndSwap(next, now+int64(reloadEvery)) {
		return
	}
	s.cluster.ReloadState(context.Background())
}

// run runs fn with keys and args by FCALL, loading the library when the
// server lacks it and calling again; once a server has refused FCALL or
// FUNCTION LOAD as an unknown command, it runs fn's script instead
// (EVALSHA, and EVAL when the server lacks the script). Each way is one
// round trip when the server holds the code. A call that fails without a
// reply makes a cluster client re-read the slot map (reloadAfter).
//
// On a cluster client, a call that ran out of redirects (see redirected)
// is run again, after a pause, while the call's deadline leaves time.
func (s *Store) run(ctx context.Context, fn *scriptFn, keys []string, args ...any) *redis.Cmd {
	if s.refusing.Load() {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(s.watch.refuse())
		return cmd
	}
	for attempt := 0; ; attempt++ {
		cmd := s.runOnce(ctx, fn, keys, args...)
		err := cmd.Err()
		if err == nil {
			return cmd
		}
		if s.cluster != nil && redirected(err) {
			if pauseBeforeRetry(ctx, attempt, 0) {
				continue
			}
			cmd.SetErr(&resharding{err: err, attempts: attempt + 1})
			return cmd
		}
		s.reloadAfter(err)
		return cmd
	}
}

// runTake runs the take script with keys and the encoded call blob, as
// run does (a call a cluster redirected runs again through run), and
// returns its reply. When the server has functions it
// builds the FCALL's arguments in args, which the caller keeps for the
// next call, and the function's name goes boxed once: cmdable.FCall
// allocates both on every call. A non-nil node is the cluster master the
// caller found for keys' hash slot: the FCALL goes to it directly, without
// the cluster client's second look-up of the slot, and should the slot
// have moved, the redirected call runs again through run.
func (s *Store) runTake(ctx context.Context, node *redis.Client, keys []string, blob []byte, args *[]any) (string, error) {
	if s.refusing.Load() {
		return "", s.watch.refuse()
	}
	if !s.noFunctions.Load() {
		a := append((*args)[:0], "fcall", takeFn.nameArg, len(keys))
		for _, k := range keys {
			a = append(a, k)
		}
		a = append(a, blob)
		cmd := redis.NewCmd(ctx, a...)
		c := s.client
		if node != nil {
			c = node
		}
		_ = c.Process(ctx, cmd)
		clear(a) // hold no keys in the pool
		*args = a[:0]
		err := cmd.Err()
		if !isUnknownCommand(err) && !isFunctionMissing(err) && (s.cluster == nil || !redirected(err)) {
			s.reloadAfter(err)
			return cmd.Text()
		}
	}
	return s.run(ctx, takeFn, keys, blob).Text()
}

func (s *Store) runOnce(ctx context.Context, fn *scriptFn, keys []string, args ...any) *redis.Cmd {
	if !s.noFunctions.Load() {
		cmd := s.client.FCall(ctx, fn.name, keys, args...)
		err := cmd.Err()
		switch {
		case isUnknownCommand(err):
			s.noFunctions.Store(true)
		case isFunctionMissing(err):
			if lerr := s.loadScripts(ctx); lerr != nil {
				cmd.SetErr(fmt.Errorf("loading the function library: %w", lerr))
				return cmd
			}
			if !s.noFunctions.Load() {
				return s.client.FCall(ctx, fn.name, keys, args...)
			}
		default:
			return cmd
		}
	}
	return fn.script.Run(ctx, s.client, keys, args...)
}

// callContext returns the context of one call made for ctx: ctx's values,
// not its cancellation, and the store's timeout from now. The caller
// releases it when the call returns.
func (s *Store) callContext(ctx context.Context) *runCtx {
	var at time.Time
	if s.timeout > 0 {
		at = time.Now().Add(s.timeout)
	}
	return newRunCtx(ctx, at)
}

// call holds the arguments of one script run.
type call struct {
	keys  []string
	args  []any
	blob  []byte
	group [maxItems]int // group of each item (Cluster and Ring)
	items []core.Item   // Refund: the charged items
	sub   []core.Outcome
	undo  []int64 // Refund: 1 to take back a sliding log entry the take added
}

var callPool = sync.Pool{New: func() any {
	return &call{keys: make([]string, 0, 16), args: make([]any, 0, 4), blob: make([]byte, 0, 16*takeItemSize)}
}}

func getCall() *call {
	c := callPool.Get().(*call)
	c.keys, c.args, c.blob = c.keys[:0], c.args[:0], c.blob[:0]
	return c
}

func putCall(c *call) {
	clear(c.keys[:cap(c.keys)])
	clear(c.args[:cap(c.args)])
	clear(c.items[:cap(c.items)])
	c.items = c.items[:0]
	c.sub = c.sub[:0]
	c.undo = c.undo[:0]
	callPool.Put(c)
}

// takeItemSize is about the size of an encoded item with a short budget
// name, for buffer capacities.
const takeItemSize = 64

// An encoder appends items[i] to b as a script reads it, with the budget's
// record name and the numbers of its partition's key and of its sliding
// log's key (0 for none) among the keys of its run or decision.
type encoder func(b []byte, i int, name string, k, lk int) []byte

// appendItems appends to keys the keys the scripts need for the items
// items[idx[j]] (every item when idx is nil): each partition's key once,
// and each sliding log's key; and appends each item to blob with enc,
// numbering keys from 1 within those it appended.
func (s *Store) appendItems(keys []string, blob []byte, items []core.Item, idx []int, enc encoder) ([]string, []byte) {
	base := len(keys)
	n := len(items)
	if idx != nil {
		n = len(idx)
	}
	var part [maxItems]int // each item's partition key number
	for j := 0; j < n; j++ {
		i := j
		if idx != nil {
			i = idx[j]
		}
		it := &items[i]
		k := 0
		for jj := 0; jj < j; jj++ {
			ii := jj
			if idx != nil {
				ii = idx[jj]
			}
			if items[ii].Key == it.Key {
				k = part[jj]
				break
			}
		}
		if k == 0 {
			pk, _, _ := partitionKey(s.prefix, it.Key)
			keys = append(keys, pk)
			k = len(keys) - base
		}
		part[j] = k
		lk := 0
		switch it.Limit.Algorithm {
		case core.SlidingLog:
			keys = append(keys, logKey(keys[base+k-1], it.Budget))
			lk = len(keys) - base
		case core.Concurrency:
			keys = append(keys, slotKey(keys[base+k-1], it.Budget))
			lk = len(keys) - base
		}
		blob = enc(blob, i, recordName(it.Budget), k, lk)
	}
	return keys, blob
}

// takeUndo is the take script's flag (the first byte of its argument) to
// add what undoing each item needs to its outcome.
const takeUndo = 1

// appendCall appends the head of the take script's one argument: its
// flags, the number of decisions, each decision's number of items
// (counts) and of keys (kcounts). The decisions' items follow it.
func appendCall(b []byte, undo bool, counts, kcounts []byte) []byte {
	flags := byte(0)
	if undo {
		flags |= takeUndo
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(counts)))
	b = append(b, counts...)
	return append(b, kcounts...)
}

// appendOneCall appends the take script's argument for one decision of n
// items, nk keys and the encoded items blob.
func appendOneCall(b []byte, undo bool, n, nk int, blob []byte) []byte {
	c := [2]byte{byte(n), byte(nk)}
	return append(appendCall(b, undo, c[:1], c[1:]), blob...)
}

func appendInt(b []byte, v int64) []byte { return binary.LittleEndian.AppendUint64(b, uint64(v)) }

// appendHead appends an item's key numbers (k + 256×lk; a decision, a
// group or a refund has at most 2×maxItems keys) and record name.
func appendHead(b []byte, name string, k, lk int) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(k|lk<<8))
	b = append(b, name...)
	return append(b, 0)
}

// appendTakeItem appends it as the take script reads it: its keys, its
// record name, algorithm + 16×shadow, window µs, quota, burst, max wait
// µs, cost.
func appendTakeItem(b []byte, it *core.Item, name string, k, lk int) []byte {
	l := &it.Limit
	alg := byte(l.Algorithm)
	if it.Shadow {
		alg |= 16
	}
	b = appendHead(b, name, k, lk)
	b = append(b, alg)
	b = appendInt(b, l.Window.Microseconds())
	b = appendInt(b, l.Quota)
	b = appendInt(b, l.Burst)
	b = appendInt(b, l.MaxWait.Microseconds())
	return appendInt(b, it.Cost)
}

// appendRefundItem appends it as the refund script reads it: its keys, its
// record name, algorithm, window µs, quota, cost, stamp µs, undo, reset µs
// (the outcome's Reset, from which a bucket's refund finds what of the
// charge has not drained).
func appendRefundItem(b []byte, it *core.Item, o *core.Outcome, undo int64, name string, k, lk int) []byte {
	l := &it.Limit
	b = appendHead(b, name, k, lk)
	b = append(b, byte(l.Algorithm))
	b = appendInt(b, l.Window.Microseconds())
	b = appendInt(b, l.Quota)
	b = appendInt(b, it.Cost)
	b = appendInt(b, o.Stamp)
	b = appendInt(b, undo)
	return appendInt(b, o.Reset.Microseconds())
}

func storeError(op string, err error) error {
	return fmt.Errorf("redis store: %s: %w", op, classify(err))
}

// Take implements [core.Store]. On a single server it is one script run
// (one round trip) for any number of items, shared with the Takes that
// queue beside it while the store's runs are in flight (see the package
// documentation, Batching). On a cluster, a Take whose items lie in one
// hash slot is batched in the same way with that slot's; otherwise the
// items are grouped by hash slot and the groups run in one pipelined
// round trip, and if a group denies, the groups that charged are
// refunded, so the result stays all-or-nothing.
func (s *Store) Take(ctx context.Context, items []core.Item, out []core.Outcome) error {
	if len(out) < len(items) {
		return errors.New("redis store: take: fewer outcomes than items")
	}
	if len(items) == 0 {
		return nil
	}
	if len(items) > maxItems {
		return fmt.Errorf("redis store: take: %d items exceed the maximum of %d", len(items), maxItems)
	}
	for i := range items {
		if err := items[i].Validate(); err != nil {
			return storeError("take", err)
		}
	}
	if err := core.CheckDistinct(items); err != nil {
		return storeError("take", err)
	}
	if leased(items) {
		return s.leases.take(ctx, items, out)
	}
	return s.takeRemote(ctx, items, out)
}

// takeRemote is Take in Redis, the items checked: one script run, batched
// on a single server and within one hash slot of a cluster, grouped by
// hash slot when the items span several.
func (s *Store) takeRemote(ctx context.Context, items []core.Item, out []core.Outcome) error {
	if s.mode == modeSingle {
		return s.takeBatched(ctx, s.batch, items, out, -1)
	}
	if b, slot := s.nodeBatcher(items); b != nil {
		return s.takeBatched(ctx, b, items, out, slot)
	}
	if b := s.shardBatcher(items); b != nil {
		return s.takeBatched(ctx, b, items, out, -1)
	}
	rc := s.callContext(ctx)
	defer rc.release()
	ctx = rc
	c := getCall()
	defer putCall(c)
	return s.takeGrouped(ctx, c, items, out)
}

// Refund implements [core.Store]. It gives back, for each charged outcome,
// the cost of its item, in one round trip.
func (s *Store) Refund(ctx context.Context, items []core.Item, outcomes []core.Outcome) error {
	if len(outcomes) < len(items) {
		return errors.New("redis store: refund: fewer outcomes than items")
	}
	if len(items) > maxItems {
		return fmt.Errorf("redis store: refund: %d items exceed the maximum of %d", len(items), maxItems)
	}
	c := getCall()
	defer putCall(c)
	for i := range items {
		if outcomes[i].Charged && items[i].Cost > 0 {
			if err := items[i].Validate(); err != nil {
				return storeError("refund", err)
			}
			c.items = append(c.items, items[i])
			c.sub = append(c.sub, outcomes[i])
			c.undo = append(c.undo, 0)
		}
	}
	if len(c.items) == 0 {
		return nil
	}
	rc := s.callContext(ctx)
	defer rc.release()
	ctx = rc
	if s.mode == modeSingle {
		c.keys, c.blob = s.appendItems(c.keys, c.blob, c.items, nil, func(b []byte, i int, name string, k, lk int) []byte {
			return appendRefundItem(b, &c.items[i], &c.sub[i], 0, name, k, lk)
		})
		c.args = append(c.args, c.blob)
		if err := s.run(ctx, refundFn, c.keys, c.args...).Err(); err != nil {
			return storeError("refund", err)
		}
		return nil
	}
	return s.refundGrouped(ctx, c)
}

// undone is an allowed item's remaining and reset (µs) if its take is
// undone, whether its charge added a sliding log entry, and the take's
// time (µs; an outcome's Stamp is a concurrency slot's id instead).
type undone struct{ remaining, reset, added, now int64 }

// The take script's reply: now, then replyPer integers per item
// (replyPerUndo when the script was asked for what undoing needs).
const (
	replyPer     = 4
	replyPerUndo = 6
)

// parseTakeReply reads the take script's reply, little-endian 8-byte
// integers: now, then replyPer per item (replyPerUndo when undo is not
// nil), into out and undo.
func parseTakeReply(reply string, out []core.Outcome, undo []undone) error {
	per := replyPer
	if undo != nil {
		per = replyPerUndo
	}
	if want := 8 * (1 + per*len(out)); len(reply) != want {
		return fmt.Errorf("malformed reply: %d bytes for %d items, want %d", len(reply), len(out), want)
	}
	return parseOutcomes(reply[8:], le64(reply), out, undo)
}

// takenSlot is the reply's flag of a concurrency slot taken: the item's
// wait is then the slot's id, which becomes the outcome's Stamp.
const takenSlot = 8

// parseOutcomes reads the outcomes of out (and undo) from the take
// script's reply after its first integer, now. Each item is its flags (1
// allowed, 2 charged, 4 a sliding log entry added, only with undo, 8 a
// concurrency slot taken), remaining, reset µs and wait µs (the delay of
// an allowed item, the retry-after of a denied one, the slot's id with
// flag 8), then with undo the remaining and reset µs if the take is
// undone.
func parseOutcomes(reply string, now int64, out []core.Outcome, undo []undone) error {
	p := 0
	next := func() int64 {
		v := le64(reply[p : p+8])
		p += 8
		return v
	}
	known := int64(3 | takenSlot) // allowed, charged, a slot's id in wait
	if undo != nil {
		known |= 4 // added, for the undo
	}
	for i := range out {
		flags, rem, reset, wait := next(), next(), next(), next()
		if flags&^known != 0 || flags&takenSlot != 0 && (flags&3 != 3 || wait < now) || rem < 0 || !durationMicros(reset) || !durationMicros(wait) {
			return fmt.Errorf("malformed reply: item %d out of range", i)
		}
		if undo != nil {
			undo[i] = undone{next(), next(), flags >> 2 & 1, now}
			if undo[i].remaining < 0 || !durationMicros(undo[i].reset) {
				return fmt.Errorf("malformed reply: item %d out of range", i)
			}
		}
		o := core.Outcome{
			Allowed:   flags&1 != 0,
			Charged:   flags&2 != 0,
			Remaining: rem,
			Reset:     time.Duration(reset) * time.Microsecond,
			Stamp:     now,
		}
		switch {
		case flags&takenSlot != 0:
			o.Stamp = wait // the slot's id, which its refund removes
		case o.Allowed:
			o.Delay = time.Duration(wait) * time.Microsecond
		default:
			o.RetryAfter = time.Duration(wait) * time.Microsecond
		}
		out[i] = o
	}
	return nil
}

// durationMicros reports whether v µs is a valid outcome duration: not
// negative, and representable as a time.Duration.
func durationMicros(v int64) bool {
	return v >= 0 && v <= math.MaxInt64/int64(time.Microsecond)
}

// le64 decodes a little-endian 8-byte integer from s (len(s) >= 8).
func le64(s string) int64 {
	_ = s[7]
	return int64(uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56)
}
