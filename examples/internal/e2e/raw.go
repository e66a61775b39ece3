package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// RawResult is what a server answered to a request sent by [Process.Raw].
type RawResult struct {
	// Status is the status code of the answer's status line.
	Status int
	// Line is the status line, without its CRLF.
	Line string
	// After is how long the answer took, from the connection's opening.
	After time.Duration
}

// Raw sends request, bytes written as they are (so it may be malformed,
// oversized or incomplete), on a new TCP connection to the example, and
// returns the status line of its answer. The request is written on its own
// goroutine while the answer is read, so a server that answers before
// reading everything is still heard. It returns an error when the
// connection ends, or timeout passes, without a status line: the server
// dropped the request.
func (p *Process) Raw(request string, timeout time.Duration) (RawResult, error) {
	return p.RawWith(request, timeout, RawOptions{})
}

// RawOptions say how [Process.RawWith] talks to the example.
type RawOptions struct {
	// From is the connection's source address, any address of
	// 127.0.0.0/8 (see [Process.ClientFrom]), so that requests can spend
	// different clients' budgets; empty lets the system choose.
	From string
	// WriteFirst writes the whole request before reading the answer, as
	// most clients do. A server that closes its connection with input
	// still unread makes the kernel reset the connection, and the client's
	// next write fails: such a client stops there and never reads the
	// answer, so a failed write is an error even when a status line could
	// be read after it. Without WriteFirst, the request is written on its
	// own goroutine while the answer is read, and a failed write is
	// ignored.
	WriteFirst bool
	// Segment, with WriteFirst, is the most one write sends: a large
	// request then goes out in pieces, as over a real network (HTTP
	// clients write through a 4 KiB buffer). 0 writes it at once.
	Segment int
	// Pause, with WriteFirst, is the wait between two writes.
	Pause time.Duration
}

// RawWith is [Process.Raw] with options.
func (p *Process) RawWith(request string, timeout time.Duration, o RawOptions) (RawResult, error) {
	start := time.Now()
	d := net.Dialer{Timeout: 5 * time.Second}
	if o.From != "" {
		a, err := netip.ParseAddr(o.From)
		if err != nil || !a.IsLoopback() {
			return RawResult{}, fmt.Errorf("e2e: source address %q is not a loopback address", o.From)
		}
		d.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
	}
	c, err := d.Dial("tcp", p.Addr)
	if err != nil {
		return RawResult{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(start.Add(timeout))
	var werr error
	if o.WriteFirst {
		werr = writeSegments(c, request, o.Segment, o.Pause)
	} else {
		go func() { _, _ = c.Write([]byte(request)) }()
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	after := time.Since(start)
	if werr != nil {
		return RawResult{After: after}, fmt.Errorf("writing the request: %w (then read %q, %v)", werr, line, err)
	}
	if err != nil {
		return RawResult{After: after}, fmt.Errorf("no status line after %v (read %q): %w", after.Round(time.Millisecond), line, err)
	}
	line = strings.TrimRight(line, "\r\n")
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") {
		return RawResult{Line: line, After: after}, fmt.Errorf("%q is not a status line", line)
	}
	code, err := strconv.Atoi(f[1])
	if err != nil {
		return RawResult{Line: line, After: after}, fmt.Errorf("%q is not a status line", line)
	}
	return RawResult{Status: code, Line: line, After: after}, nil
}

// writeSegments writes request to c in writes of at most size bytes (all
// at once when size is 0), pause apart.
func writeSegments(c net.Conn, request string, size int, pause time.Duration) error {
	if size <= 0 {
		size = len(request)
	}
	for off := 0; off < len(request); off += size {
		if off > 0 {
			time.Sleep(pause)
		}
		if _, err := io.WriteString(c, request[off:min(off+size, len(request))]); err != nil {
			return fmt.Errorf("at byte %d of %d: %w", off, len(request), err)
		}
	}
	return nil
}

// RawRequest builds an HTTP/1.1 request for [Process.Raw]: the request
// line, Host, the header fields given as name, value pairs, and, when body
// is not empty, Content-Type: application/json, Content-Length and the
// body. The connection is marked Connection: close.
func RawRequest(method, target, body string, header ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: example\r\nConnection: close\r\n", method, target)
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", header[i], header[i+1])
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// NestedArrays returns n nested JSON arrays, "[[[...]]]": a small body
// that a recursive parser without a depth limit would choke on.
func NestedArrays(n int) string {
	return strings.Repeat("[", n) + strings.Repeat("]", n)
}
