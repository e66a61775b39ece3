package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotagate/quotagate/core"
)

// DefaultMaxBatch is how many decisions one script run may evaluate on a
// single server unless [Config.MaxBatch] says otherwise.
const DefaultMaxBatch = 64

// maxBatchItems bounds the items of one batched script run. A
// decision alone may have up to maxItems.
const maxBatchItems = 512

// defaultInflight is how many script runs one Store keeps in flight at
// once on a single server. With one, every Take that arrives while a run
// is in flight joins the next batch, which goes out as soon as the run
// returns; the client then parses and delivers one batch while the server
// runs the next. With two, a Take that finds the second slot free goes
// out alone, so batches are smaller: BenchmarkRedis store-1budget, both
// interleaved on a loaded 2-core machine, client + server CPU per
// decision at 8 goroutines about 23 µs with one against 33 µs with two,
// at 64 goroutines 11 µs against 15 µs (3.9 and 2.6, 31 and 20
// decisions per run).
const defaultInflight = 1

// A pending Take on a single server: its keys and encoded items, and where
// the sender leaves its outcomes. Its buffers belong to the pending, never
// to the caller, so a caller that gave up (deadline) leaves nothing behind
// that the sender could write into.
type pending struct {
	keys     []string
	blob     []byte // the encoded items
	call     []byte // the script's argument when the pending goes alone
	out      []core.Outcome
	err      error
	deadline time.Time   // zero: none
	timer    *time.Timer // a queued caller's deadline, reused
	state    atomic.Int32
	done     chan struct{} // capacity 1: the sender's "delivered"
}

// A pending's state. idle → queued (in the queue) → taken (in a batch
// being sent) → delivered (outcomes written, done signalled) or abandoned
// (its caller's deadline passed first; the sender recycles it).
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
	p.deadline = time.Time{}
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
// At most slots runs are in flight. A Take that finds a free slot takes it
// and sends itself at once, on its own goroutine and under its own
// deadline. Otherwise it joins the queue. Whoever finishes a run while the
// queue holds Takes passes its slot to the next batch, taken from the head
// of the queue (up to max decisions and maxBatchItems items) and sent by a
// goroutine that keeps sending batches until it finds the queue empty and
// frees the slot; there is no goroutine while nothing is queued. A batch's
// run is bounded by the latest deadline of its callers, and each caller
// waits only until its own.
type batcher struct {
	mu       sync.Mutex
	inflight int
	slots    int
	max      int
	queue    []*pending
}

// batchBuf holds the arguments of one batched run.
type batchBuf struct {
	batch   []*pending
	keys    []string
	blob    []byte
	counts  []byte // each decision's items
	kcounts []byte // each decision's keys
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

// takeSingle is Take on a single server.
func (s *Store) takeSingle(ctx context.Context, items []core.Item, out []core.Outcome) error {
	p := getPending(len(items))
	p.keys, p.blob = s.appendItems(p.keys, p.blob, items, nil, func(b []byte, i int, name string, k, lk int) []byte {
		return appendTakeItem(b, &items[i], name, k, lk)
	})
	out = out[:len(items)]
	b := s.batch
	if b != nil {
		b.mu.Lock()
		if b.inflight == b.slots {
			return s.await(p, out) // unlocks b.mu
		}
		// A free slot means nothing is queued (the queue only fills while
		// every slot is busy): go out at once.
		b.inflight++
		b.mu.Unlock()
	}
	one := [1]*pending{p}
	ctx, cancel := s.callContext(ctx)
	s.runBatch(ctx, one[:], nil)
	cancel()
	if b != nil {
		if next := s.nextBatch(); next != nil {
			go s.sendBatches(next)
		}
	}
	return p.finish(out)
}

// await queues p, with s.batch.mu held, and waits until its batch has run
// or the store's timeout has passed, whichever comes first.
func (s *Store) await(p *pending, out []core.Outcome) error {
	b := s.batch
	var expired <-chan time.Time
	if s.timeout > 0 {
		p.deadline = time.Now().Add(s.timeout)
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

	select {
	case <-p.done:
		if p.timer != nil {
			p.timer.Stop()
		}
		return p.finish(out)
	case <-expired:
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

// nextBatch takes the next batch from the head of the queue, or frees the
// caller's slot and returns nil when the queue is empty.
func (s *Store) nextBatch() *batchBuf {
	b := s.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.inflight--
		return nil
	}
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
	for _, p := range b.queue[:n] {
		p.state.Store(stateTaken)
	}
	bb.batch = append(bb.batch, b.queue[:n]...)
	m := copy(b.queue, b.queue[n:])
	clear(b.queue[m:])
	b.queue = b.queue[:m]
	return bb
}

// sendBatches sends bb, then every batch that forms while it is in flight,
// until the queue is empty.
func (s *Store) sendBatches(bb *batchBuf) {
	for bb != nil {
		ctx, cancel := batchContext(bb.batch)
		s.runBatch(ctx, bb.batch, bb)
		cancel()
		for _, p := range bb.batch {
			if p.state.CompareAndSwap(stateTaken, stateDelivered) {
				p.done <- struct{}{}
			} else {
				putPending(p) // abandoned by its caller
			}
		}
		putBatchBuf(bb)
		bb = s.nextBatch()
	}
}

// batchContext bounds a batch's run by the latest deadline of its
// callers: each caller still returns at its own.
func batchContext(batch []*pending) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, p := range batch {
		if p.deadline.IsZero() {
			return context.Background(), func() {}
		}
		if p.deadline.After(last) {
			last = p.deadline
		}
	}
	return context.WithDeadline(context.Background(), last)
}

// runBatch runs the take script once for the decisions of batch and
// leaves each one's outcomes or error in its pending. bb holds the
// argument buffers when the batch has more than one decision.
func (s *Store) runBatch(ctx context.Context, batch []*pending, bb *batchBuf) {
	var err error
	var reply string
	if len(batch) == 1 {
		p := batch[0]
		p.call = appendOneCall(p.call[:0], false, len(p.out), len(p.keys), p.blob)
		reply, err = s.run(ctx, takeFn, p.keys, p.call).Text()
	} else {
		for _, p := range batch {
			bb.keys = append(bb.keys, p.keys...)
			bb.counts = append(bb.counts, byte(len(p.out)))
			bb.kcounts = append(bb.kcounts, byte(len(p.keys)))
		}
		bb.blob = appendCall(bb.blob, false, bb.counts, bb.kcounts)
		for _, p := range batch {
			bb.blob = append(bb.blob, p.blob...)
		}
		reply, err = s.run(ctx, takeFn, bb.keys, bb.blob).Text()
	}
	if err == nil {
		err = parseBatchReply(reply, batch)
	}
	if err != nil {
		err = storeError("take", err)
		for _, p := range batch {
			p.err = err
		}
	}
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
