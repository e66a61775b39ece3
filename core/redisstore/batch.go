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
	keys  []string
	blob  []byte // the encoded items
	call  []byte // the script's argument when the pending goes alone
	out   []core.Outcome
	err   error
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
// At most slots runs are in flight. A Take that finds a free slot takes it
// and sends itself at once, on its own goroutine and under its own
// deadline. Otherwise it joins the queue. Whoever finishes a run while the
// queue holds Takes passes its slot to the next batch, taken from the head
// of the queue (up to max decisions and maxBatchItems items) and sent by a
// goroutine that keeps sending batches until it finds the queue empty and
// frees the slot; there is no goroutine while nothing is queued.
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
	slots    int
	max      int
	queue    []*pending

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

// await queues p, with s.batch.mu held, and waits until its batch has run,
// or until the store has answered no run for the store's timeout, whichever
// comes first.
func (s *Store) await(p *pending, out []core.Outcome) error {
	b := s.batch
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

// sendBatches sends bb, then every batch that forms while it is in flight,
// until the queue is empty.
func (s *Store) sendBatches(bb *batchBuf) {
	for bb != nil {
		ctx, cancel := s.batchContext(bb.batch[0].sent)
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

// batchContext bounds the run of a batch sent at sent by the store's
// timeout from then: the deadline measures the server's answer, not the
// batch's wait in the queue.
func (s *Store) batchContext(sent time.Time) (context.Context, context.CancelFunc) {
	if s.timeout > 0 {
		return context.WithDeadline(context.Background(), sent.Add(s.timeout))
	}
	return context.Background(), func() {}
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
	if b := s.batch; b != nil && answered(err) {
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
	}
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
