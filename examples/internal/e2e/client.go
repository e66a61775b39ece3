package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// Client sends requests to an example over real TCP connections from one
// loopback source address.
type Client struct {
	base string
	hc   *http.Client
}

// Response is a response read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// String describes the response for test messages.
func (r *Response) String() string {
	return fmt.Sprintf("%d %v %s", r.Status, r.Header, r.Body)
}

// Client returns a client of the example that connects from 127.0.0.1.
func (p *Process) Client(t testing.TB) *Client {
	t.Helper()
	return p.ClientFrom(t, "")
}

// ClientFrom returns a client of the example whose connections come from
// the source address ip, any address of 127.0.0.0/8 (Linux routes the
// whole block to the loopback interface), so that a test can play several
// clients the example tells apart by address. An empty ip lets the system
// choose (127.0.0.1).
func (p *Process) ClientFrom(t testing.TB, ip string) *Client {
	t.Helper()
	return NewClient(t, "http://"+p.Addr, ip)
}

// NewClient returns a client of the server at base ("http://HOST:PORT")
// whose connections come from the source address ip ("" lets the system
// choose). Its idle connections are closed when the test ends.
func NewClient(t testing.TB, base, ip string) *Client {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	if ip != "" {
		a, err := netip.ParseAddr(ip)
		if err != nil || !a.IsLoopback() {
			t.Fatalf("e2e: source address %q is not a loopback address", ip)
		}
		d.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
	}
	tr := &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &Client{base: strings.TrimSuffix(base, "/"), hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// Send sends one request and reads the whole response. header holds
// name, value pairs ("Authorization", "Bearer x"). A non-empty body is
// sent as application/json.
func (c *Client) Send(method, path, body string, header ...string) (*Response, error) {
	if len(header)%2 != 0 {
		return nil, fmt.Errorf("e2e: header needs name, value pairs, got %d strings", len(header))
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the body: %w", method, path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Do is Send that fails the test on a transport error. Call it from the
// test's goroutine.
func (c *Client) Do(t testing.TB, method, path, body string, header ...string) *Response {
	t.Helper()
	r, err := c.Send(method, path, body, header...)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return r
}

// Repeat sends the same request n times from workers goroutines at once
// and returns the responses in the order they completed. It stops at the
// first transport error and returns it with the responses so far.
func (c *Client) Repeat(n, workers int, method, path, body string, header ...string) ([]*Response, error) {
	workers = max(1, min(workers, n))
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	var (
		mu    sync.Mutex
		out   = make([]*Response, 0, n)
		first error
		wg    sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				r, err := c.Send(method, path, body, header...)
				mu.Lock()
				if err != nil {
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				out = append(out, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out, first
}

// Statuses counts responses by status code.
func Statuses(rs []*Response) map[int]int {
	m := map[int]int{}
	for _, r := range rs {
		m[r.Status]++
	}
	return m
}
