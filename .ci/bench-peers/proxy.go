package benchpeers

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"time"
)

// A Proxy forwards TCP connections to an upstream address and holds every
// chunk of bytes, in each direction, for a set time before passing it on:
// a round trip through it takes twice the delay more than without it. It
// stands in for a network between the client and Redis, without any
// kernel set-up.
//
// Go's timers wake sub-millisecond sleeps late on an idle process, so the
// proxy sleeps in the kernel (nanosleep) where the system has it, on one
// thread that writes every connection's chunks in turn; a chunk is still
// held a little longer than the delay (tens of microseconds), which Held
// reports.
type Proxy struct {
	Addr     string
	upstream string
	delay    time.Duration
	ln       net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool // Close began: track refuses
	wg     sync.WaitGroup

	qmu   sync.Mutex
	queue []chunk // chunks read and not yet written, in due order
	wake  chan struct{}
	done  chan struct{}

	held heldStats
}

// heldStats sums how long the proxy really held its chunks.
type heldStats struct {
	mu  sync.Mutex
	n   int64
	sum time.Duration
}

func (h *heldStats) add(d time.Duration) {
	h.mu.Lock()
	h.n++
	h.sum += d
	h.mu.Unlock()
}

// StartProxy listens on a free 127.0.0.1 port and forwards to upstream,
// holding each direction for delay.
func StartProxy(upstream string, delay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), upstream: upstream, delay: delay, ln: ln, conns: map[net.Conn]struct{}{},
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	p.wg.Add(2)
	go p.accept()
	go p.deliver()
	return p, nil
}

// Held returns the mean time a chunk was held, which is the delay plus
// the sleep's lateness.
func (p *Proxy) Held() time.Duration {
	p.held.mu.Lock()
	defer p.held.mu.Unlock()
	if p.held.n == 0 {
		return 0
	}
	return p.held.sum / time.Duration(p.held.n)
}

// Close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	close(p.done)
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			// The listener was closed (Close closes the connections
			// it tracked, and track refuses from then on) or failed.
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = down.Close()
			continue
		}
		if !p.track(down) || !p.track(up) {
			_ = down.Close()
			_ = up.Close()
			return
		}
		p.wg.Add(2)
		go p.read(down, up)
		go p.read(up, down)
	}
}

// A chunk is bytes read from src at one time, due to be written to dst
// at due; a chunk without bytes ends the connection.
type chunk struct {
	src, dst net.Conn
	b        []byte
	due      time.Time
}

var chunkPool = sync.Pool{New: func() any { return make([]byte, 64<<10) }}

// read reads src into chunks for dst until src ends, then queues the end.
// Reading goes on while earlier chunks are held, so the delay is a
// latency, not a limit on throughput.
func (p *Proxy) read(src, dst net.Conn) {
	defer p.wg.Done()
	for {
		buf := chunkPool.Get().([]byte)
		n, err := src.Read(buf)
		if n > 0 {
			p.push(chunk{src: src, dst: dst, b: buf[:n], due: time.Now().Add(p.delay)})
		} else {
			chunkPool.Put(buf[:cap(buf)]) //nolint:staticcheck // a slice, reused as is
		}
		if err != nil {
			p.push(chunk{src: src, dst: dst, due: time.Now().Add(p.delay)})
			return
		}
	}
}

// push queues c. Every chunk is held for the same delay, so the queue is
// in order of due time.
func (p *Proxy) push(c chunk) {
	p.qmu.Lock()
	p.queue = append(p.queue, c)
	p.qmu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// deliver writes each queued chunk when it is due, for every connection:
// one thread that sleeps in the kernel, instead of one per direction,
// which would leave the Go scheduler a sleeping thread per connection to
// hand its processors around.
func (p *Proxy) deliver() {
	defer p.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		p.qmu.Lock()
		if len(p.queue) == 0 {
			p.qmu.Unlock()
			select {
			case <-p.wake:
				continue
			case <-p.done:
				return
			}
		}
		c := p.queue[0]
		p.queue[0] = chunk{}
		p.queue = p.queue[1:]
		p.qmu.Unlock()
		if d := time.Until(c.due); d > 0 {
			sleep(d)
		}
		if c.b == nil {
			_ = c.src.Close()
			_ = c.dst.Close()
			continue
		}
		p.held.add(p.delay + time.Since(c.due))
		if _, err := c.dst.Write(c.b); err != nil && !errors.Is(err, io.EOF) {
			_ = c.src.Close()
			_ = c.dst.Close()
		}
		chunkPool.Put(c.b[:cap(c.b)]) //nolint:staticcheck // a slice, reused as is
	}
}
