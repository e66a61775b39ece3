package adapter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/adapter"
	"github.com/quotagate/quotagate/keyfunc"
)

// exchange is a minimal core.Exchange for a net/http handler that
// copies the header values (a real adapter avoids the copy, see nethttp).
type exchange struct {
	w    http.ResponseWriter
	r    *http.Request
	next http.Handler
}

func (x *exchange) FieldBuffer() []byte { return nil }

func (x *exchange) SetHeader(name, value string) { x.w.Header()[name] = []string{strings.Clone(value)} }

func (x *exchange) DelHeader(name string) { x.w.Header().Del(name) }

func (x *exchange) Deny(d *core.Decision, den core.Denial) error {
	for k, v := range den.Header {
		x.w.Header()[k] = v
	}
	x.w.WriteHeader(den.Status)
	_, err := x.w.Write(den.Body)
	return err
}

func (x *exchange) Next(bool) (int, error) {
	x.next.ServeHTTP(x.w, x.r)
	return 0, nil // this adapter does not support core.CountWhen
}

// middleware is a single-layer adapter: it fills the request view, and
// Layer.Serve does the rest.
func middleware(l *core.Layer, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var st core.RequestState
		st.Request = core.Request{
			Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
			RemoteAddr: r.RemoteAddr, Header: r.Header, Context: r.Context(),
		}
		_ = l.Serve(&st, &exchange{w: w, r: r, next: next})
	})
}

// An adapter for another router: a request view in, an Exchange out.
func Example() {
	l, err := adapter.LimitBy(1, time.Minute, keyfunc.PeerIP())
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(middleware(l, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for range 2 {
		res, err := http.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Println(res.StatusCode, res.Header.Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "default";q=1;w=60
	// 429 "default";q=1;w=60
}
