package e2e

import (
	"bufio"
	"fmt"
	"net"
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
	start := time.Now()
	c, err := net.DialTimeout("tcp", p.Addr, 5*time.Second)
	if err != nil {
		return RawResult{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(start.Add(timeout))
	go func() { _, _ = c.Write([]byte(request)) }()
	line, err := bufio.NewReader(c).ReadString('\n')
	after := time.Since(start)
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
