package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/redis/go-redis/v9"
)

// DefaultMaxBatch is how many decisions one script run may evaluate on a
// single server unless [Config.MaxBatch] says otherwise.
const DefaultMaxBatch = 64

// maxBatchItems bounds the items of one batched script run. A
// decision alone may have up to maxItems.
const maxBatchItems = 512

// A pending Take on a single server: its keys and encoded items, and where
// the sender leaves its outcomes. Its buffers belong to the pending, never
// to the caller, so a caller that gave up (deadline) leaves nothing behind
// that the sender could write into.
type pending struct {
	keys  []string
	blob  []byte // the encoded items
	call  []byte // the script's argument when the pending goes alone
	args  []any  // the call's arguments (runTake)
	out   []core.Outcome
	err   error
	slot  int         // on a cluster, the hash slot of its keys; otherwise -1
	start time.Time   // when its Take began
	sent  time.Time   // when its batch went out
	timer *time.Timer // a waiting caller's deadline, reused
	state atomic.Int32
	done  chan struct{} // capacity 1: the sender's "delivered"
}

// A pending's state. idle → queued (in the queue) → taken (in a batch
// being sent) → delivered (outcomes written, done signalled) or abandoned
// (its caller gave up first: the store answered nothing for the store's
// timeout while it was queued, or its run outlived its deadline, which
// a client that honours deadlines never lets happen; the sender recycles
// it).
const (
	stateIdle int32 = iota
	stateQueued
	stateTaken
	stateDelivered
	stateAbandoned
)

var pendingPool = sync.Pool{New: func() any {
	return &pending{keys: make([]string, 0, 4), blob: make([]byte, 0, 4*takeItemSize), done: make(chan struct{}, 1)}
}}

func getPending(n int) *pending {
	p := pendingPool.Get().(*pending)
	if cap(p.out) < n {
		p.out = make([]core.Outcome, n)
	}
	p.out = p.out[:n]
	return p
}

func putPending(p *pending) {
	clear(p.keys)
	p.keys, p.blob, p.call, p.err = p.keys[:0], p.blob[:0], p.call[:0], nil
	p.state.Store(stateIdle)
	pendingPool.Put(p)
}

// finish copies p's outcomes to out, recycles p and returns its error.
func (p *pending) finish(out []core.Outcome) error {
	err := p.err
	if err == nil {
		copy(out, p.out)
	}
	putPending(p)
	return err
}

// A batcher gathers the Takes that arrive while script runs are in flight
// on a single server, so that they go out together as one run.
//
// At most gate.limit() runs are in flight, a number that adapts (runLimit)
// and that the store's batchers share (runGate). A
// Take that finds a free slot and no queue takes the slot and sends itself
// at once, on its own goroutine and under its own deadline: an idle server
// costs no wait. Otherwise it joins the queue. Whoever finishes a run while
// the queue holds Takes passes its slot to the next batch, taken from the
// head of the queue (up to max decisions and maxBatchItems items) and sent
// by a goroutine that keeps sending batches until it finds the queue empty
// and frees the slot; there is no goroutine while nothing is queued. When
// the limit has grown, the finisher also starts a sender for each slot
// that is free while Takes wait; when it has shrunk, a finisher frees its
// slot instead of sending.
//
// The store's timeout measures the store, not the queue in front of it:
// every run, a batch's too, has the timeout from when it is sent, and a
// queued caller waits as long as the server keeps answering runs. It
// gives up only once no run has been answered for the timeout, when the
// store is down or hung rather than busy. So a burst that queues more
// decisions than a few runs hold is answered in full by a store that
// answers each run in time, instead of failing (and, under the default
// failure mode, being let through unlimited) behind the third run.
type batcher struct {
	mu       sync.Mutex
	inflight int
	gate     *runGate // the store's run limit, shared by its batchers
	max      int
	queue    []*pending
	// node is, on a cluster, the master whose Takes the batcher gathers;
	// a run holds one script run per hash slot of its Takes (nil on a
	// single server and on a Ring's shard).
	node *redis.Client

	// answered is when a run last got the server's reply (a result or an
	// error reply), in nanoseconds since epoch on the monotonic clock.
	answered atomic.Int64
	epoch    time.Time
}

// noteAnswered records that a run got the server's reply now.
func (b *batcher) noteAnswered() { b.answered.Store(int64(time.Since(b.epoch))) }

// quietFor returns how long it has been since a run was last answered.
func (b *batcher) quietFor() time.Duration {
	return time.Since(b.epoch) - time.Duration(b.answered.Load())
}

// batchBuf holds the arguments of one batched run.
type batchBuf struct {
	batch   []*pending
	keys    []string
	blob    []byte
	counts  []byte // each decision's items
	kcounts []byte // each decision's keys
	args    []any  // the call's arguments (runTake)
}

var batchBufPool = sync.Pool{New: func() any {
	return &batchBuf{batch: make([]*pending, 0, DefaultMaxBatch), keys: make([]string, 0, DefaultMaxBatch),
		blob: make([]byte, 0, DefaultMaxBatch*takeItemSize), counts: make([]byte, 0, DefaultMaxBatch), kcounts: make([]byte, 0, DefaultMaxBatch)}
}}

func putBatchBuf(bb *batchBuf) {
	clear(bb.batch)
	clear(bb.keys)
	bb.batch, bb.keys, bb.blob, bb.counts, bb.kcounts = bb.batch[:0], bb.keys[:0], bb.blob[:0], bb.counts[:0], bb.kcounts[:0]
	batchBufPool.Put(bb)
}

// newBatcher returns an empty batcher for the store's server, for one
// master of its cluster or for one shard of its Ring, under the store's
// run limit. The caller joins it to the limit (runGate.join) once it
// keeps it.
func (s *Store) newBatcher() *batcher {
	return &batcher{gate: s.gate, max: s.maxBatch, epoch: s.epoch}
}

// nodeBatcher returns the batcher of the cluster master that holds the
// hash slot of every one of items, made at its first use, and that slot;
// or nil when the store does not batch on a cluster, the items span
// slots, or the client has no slot map yet (the Take's own call loads it,
// within its deadline). The slot map is read with a canceled context, as
// Shard reads it, so that this never waits on the network. Should the
// slot move to another master, the Takes queued here still reach it:
// each run's script runs go out per slot and follow the cluster's
// redirections (runNodeBatch).
func (s *Store) nodeBatcher(items []core.Item) (*batcher, int) {
	if s.cluster == nil || s.maxBatch <= 1 {
		return nil, -1
	}
	tag := partitionTag(items[0].Key)
	slot := slotOf(tag)
	for i := 1; i < len(items); i++ {
		if items[i].Key != items[0].Key && slotOf(partitionTag(items[i].Key)) != slot {
			return nil, -1
		}
	}
	node, err := s.cluster.MasterForKey(canceled, tag)
	if err != nil {
		return nil, -1
	}
	if b, ok := s.nodeBatchers.Load(node); ok {
		return b.(*batcher), slot
	}
	nb := s.newBatcher()
	nb.node = node
	b, loaded := s.nodeBatchers.LoadOrStore(node, nb)
	if !loaded {
		s.gate.join()
	}
	return b.(*batcher), slot
}

// shardBatcher returns the batcher of the Ring shard that holds every
// one of items, made at its first use, or nil when the store does not
// batch by shard or the items span shards. A Ring's shards are servers of
// their own (never cluster nodes: Open refuses those), so one script run
// may hold the keys of any partitions the shard holds, and the Ring
// sends it where its first key lives, the shard found here. Should the
// Ring move partitions between the two (a shard marked down or back up),
// a run may reach a shard that no longer holds some of its keys, as any
// call does while a Ring moves keys.
func (s *Store) shardBatcher(items []core.Item) *batcher {
	if s.ring == nil || s.maxBatch <= 1 {
		return nil
	}
	shard, err := s.ring.GetShardClientForKey(partitionTag(items[0].Key))
	if err != nil {
		return nil // the Ring's own error follows on the unbatched path
	}
	for i := 1; i < len(items); i++ {
		if items[i].Key == items[0].Key {
			continue
		}
		if c, err := s.ring.GetShardClientForKey(partitionTag(items[i].Key)); err != nil || c != shard {
			return nil
		}
	}
	if b, ok := s.ringBatchers.Load(shard); ok {
		return b.(*batcher)
	}
	b, loaded := s.ringBatchers.LoadOrStore(shard, s.newBatcher())
	if !loaded {
		s.gate.join()
	}
	return b.(*batcher)
}

// takeBatched is Take through b, the batcher of the store's one server,
// of the hash slot of every item, or of the Ring shard of every item; a
// nil b sends the Take alone.
func (s *Store) takeBatched(ctx context.Context, b *batcher, items []core.Item, out []core.Outcome, slot int) error {
	var start time.Time // for the run limit's latency, when batching
	if b != nil {
		start = time.Now()
	}
	p := getPending(len(items))
	p.slot = slot
	p.keys, p.blob = s.appendItems(p.keys, p.blob, items, nil, func(b []byte, i int, name string, k, lk int) []byte {
		return appendTakeItem(b, &items[i], name, k, lk)
	})
	out = out[:len(items)]
	if b != nil {
		b.mu.Lock()
		if b.inflight >= b.gate.limit() || len(b.queue) > 0 {
			b.gate.queued()
			p.start = start
			return s.await(b, p, out) // unlocks b.mu
		}
		b.inflight++
		b.mu.Unlock()
	}
	one := [1]*pending{p}
	rc := s.callContext(ctx)
	ok := s.runBatch(rc, b, one[:], nil)
	rc.release()
	if b != nil {
		n := 0
		if ok {
			n = 1
		}
		if next := s.nextBatch(b, time.Since(start), n); next != nil {
			go s.sendBatches(b, next)
		}
	}
	return p.finish(out)
}

// await queues p in b, with b.mu held, and waits until its batch has run,
// or until b's server has answered no run for the store's timeout,
// whichever comes first.
func (s *Store) await(b *batcher, p *pending, out []core.Outcome) error {
	var expired <-chan time.Time
	if s.timeout > 0 {
		if p.timer == nil {
			p.timer = time.NewTimer(s.timeout)
		} else {
			p.timer.Reset(s.timeout)
		}
		expired = p.timer.C
	}
	p.state.Store(stateQueued)
	b.queue = append(b.queue, p)
	b.mu.Unlock()

	for {
		select {
		case <-p.done:
			if p.timer != nil {
				p.timer.Stop()
			}
			return p.finish(out)
		case <-expired:
		}
		wait := s.timeout - b.quietFor() // queued: the store answered a run lately, so it is busy, not down
		if p.state.Load() == stateTaken {
			wait = time.Until(p.sent.Add(s.timeout)) // in flight: the run's own deadline ends it
		}
		if wait <= 0 {
			break
		}
		p.timer.Reset(wait)
	}
	b.mu.Lock()
	if p.state.Load() == stateQueued {
		// Not sent: leave the queue; nothing is charged.
		for i, q := range b.queue {
			if q == p {
				last := len(b.queue) - 1
				copy(b.queue[i:], b.queue[i+1:])
				b.queue[last] = nil
				b.queue = b.queue[:last]
				break
			}
		}
		b.mu.Unlock()
		putPending(p)
		return storeError("take", context.DeadlineExceeded)
	}
	b.mu.Unlock()
	if p.state.CompareAndSwap(stateTaken, stateAbandoned) {
		// In flight: its charge may still apply, as for any call that
		// times out. The sender recycles p.
		return storeError("take", context.DeadlineExceeded)
	}
	<-p.done // delivered meanwhile
	return p.finish(out)
}

// nextBatch is called when a run of the caller's slot in b answered n
// decisions (0 when it failed) whose latencies sum to lat. It takes the
// next batch from the head of b's queue for the caller, and starts a
// sender for each further slot the limit allows while Takes wait; or it
// frees the caller's slot and returns nil when the queue is empty or the
// limit shrank below the runs in flight.
func (s *Store) nextBatch(b *batcher, lat time.Duration, n int) *batchBuf {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 {
		b.gate.observe(lat, n)
	}
	slots := b.gate.limit()
	if len(b.queue) == 0 || b.inflight > slots {
		b.inflight--
		return nil
	}
	bb := b.takeBatch()
	for len(b.queue) > 0 && b.inflight < slots {
		b.inflight++
		go s.sendBatches(b, b.takeBatch())
	}
	return bb
}

// takeBatch takes a batch from the head of the queue, which is not empty.
func (b *batcher) takeBatch() *batchBuf {
	bb := batchBufPool.Get().(*batchBuf)
	n, items := 0, 0
	for n < len(b.queue) && n < b.max {
		k := len(b.queue[n].out)
		if n > 0 && items+k > maxBatchItems {
			break
		}
		items += k
		n++
	}
	now := time.Now()
	for _, p := range b.queue[:n] {
		p.sent = now
		p.state.Store(stateTaken)
	}
	bb.batch = append(bb.batch, b.queue[:n]...)
	m := copy(b.queue, b.queue[n:])
	clear(b.queue[m:])
	b.queue = b.queue[:m]
	return bb
}

// sendBatches sends bb, then every batch that forms in b while it is in
// flight, until b's queue is empty.
func (s *Store) sendBatches(b *batcher, bb *batchBuf) {
	for bb != nil {
		rc := s.batchContext(bb.batch[0].sent)
		var ok bool
		if b.node != nil && len(bb.batch) > 1 && !oneSlot(bb.batch) {
			ok = s.runNodeBatch(rc, b, bb.batch)
		} else {
			ok = s.runBatch(rc, b, bb.batch, bb)
		}
		rc.release()
		var lat time.Duration
		n := 0
		if ok {
			now := time.Now()
			for _, p := range bb.batch {
				lat += now.Sub(p.start)
			}
			n = len(bb.batch)
		}
		for _, p := range bb.batch {
			if p.state.CompareAndSwap(stateTaken, stateDelivered) {
				p.done <- struct{}{}
			} else {
				putPending(p) // abandoned by its caller
			}
		}
		putBatchBuf(bb)
		bb = s.nextBatch(b, lat, n)
	}
}

// batchContext bounds the run of a batch sent at sent by the store's
// timeout from then: the deadline measures the server's answer, not the
// batch's wait in the queue.
func (s *Store) batchContext(sent time.Time) *runCtx {
	var at time.Time
	if s.timeout > 0 {
		at = sent.Add(s.timeout)
	}
	return newRunCtx(context.Background(), at)
}

// runBatch runs the take script once for the decisions of batch, taken
// from b (nil: a Take sent alone without batching), and leaves each one's
// outcomes or error in its pending. bb holds the argument buffers when
// the batch has more than one decision. It reports whether the run
// answered.
func (s *Store) runBatch(ctx context.Context, b *batcher, batch []*pending, bb *batchBuf) bool {
	keys, arg, args := runArgs(bb, batch)
	var node *redis.Client // a cluster master's batcher: its runs are of one slot
	if b != nil {
		node = b.node
	}
	reply, err := s.runTake(ctx, node, keys, arg, args)
	return settleRun(b, batch, reply, err)
}

// runArgs returns the keys and the argument of one take script run of the
// decisions of batch, built in bb (in the pending itself when there is
// one decision, and bb may be nil), and the buffer runTake keeps the
// call's arguments in.
func runArgs(bb *batchBuf, batch []*pending) ([]string, []byte, *[]any) {
	if len(batch) == 1 {
		p := batch[0]
		p.call = appendOneCall(p.call[:0], false, len(p.out), len(p.keys), p.blob)
		return p.keys, p.call, &p.args
	}
	for _, p := range batch {
		bb.keys = append(bb.keys, p.keys...)
		bb.counts = append(bb.counts, byte(len(p.out)))
		bb.kcounts = append(bb.kcounts, byte(len(p.keys)))
	}
	bb.blob = appendCall(bb.blob, false, bb.counts, bb.kcounts)
	for _, p := range batch {
		bb.blob = append(bb.blob, p.blob...)
	}
	return bb.keys, bb.blob, &bb.args
}

// settleRun leaves the outcomes of a take script run's reply, or its
// error, in the pendings of batch, notes in b (nil: none) that the server
// answered, and reports whether the run answered with outcomes.
func settleRun(b *batcher, batch []*pending, reply string, err error) bool {
	if b != nil && answered(err) {
		b.noteAnswered()
	}
	if err == nil {
		err = parseBatchReply(reply, batch)
	}
	if err != nil {
		err = storeError("take", err)
		for _, p := range batch {
			p.err = err
		}
		return false
	}
	return true
}

// answered reports whether a run's error err (nil included) means the
// server replied: no error, or an error reply such as OOM, as against a
// timeout or a broken connection.
func answered(err error) bool {
	return err == nil || isReply(err)
}

// isReply reports whether err is an error reply from the server. It is
// apart from answered so that its errors.As target is allocated only
// when there is an error.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// parseBatchReply reads the take script's reply for a batch: now, then
// replyPer integers per item, the decisions' items one after the other.
func parseBatchReply(reply string, batch []*pending) error {
	n := 0
	for _, p := range batch {
		n += len(p.out)
	}
	if want := 8 * (1 + replyPer*n); len(reply) != want {
		return fmt.Errorf("malformed reply: %d bytes for %d items, want %d", len(reply), n, want)
	}
	now := le64(reply)
	off := 8
	for _, p := range batch {
		end := off + 8*replyPer*len(p.out)
		if err := parseOutcomes(reply[off:end], now, p.out, nil); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// errMaxBatch reports a bad Config.MaxBatch.
var errMaxBatch = errors.New("redis store: MaxBatch must not be negative")
