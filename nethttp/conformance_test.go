package nethttp_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/limittest"
	"github.com/quotagate/quotagate/internal/limitredis"
	"github.com/quotagate/quotagate/nethttp"
)

func TestConformance(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, TimeoutStatus: http.StatusServiceUnavailable})
}

func TestConformanceRedis(t *testing.T) {
	limittest.Run(t, limittest.Config{Serve: serve, Store: limitredis.Store(t), TimeoutStatus: http.StatusServiceUnavailable})
}

var param = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// serve builds a ServeMux for app: a route's handler is wrapped by its
// route layers, then by http.TimeoutHandler when the route has a Timeout,
// then by its group's layers, inside the mux, so the layers see the
// matched pattern.
func serve(t *testing.T, app limittest.App) string {
	mux := http.NewServeMux()
	for _, g := range app.Groups {
		for _, rt := range g.Routes {
			var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if rt.HandleContext != nil {
					body := rt.HandleContext(r.Context())
					if rt.Timeout != 0 {
						return // the timeout handler answers
					}
					_, _ = io.WriteString(w, body)
					return
				}
				body := rt.Handle()
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				if rt.Status != 0 {
					w.WriteHeader(rt.Status)
				}
				_, _ = io.WriteString(w, body)
			})
			h = wrap(h, rt.Layers)
			if rt.Timeout != 0 {
				h = http.TimeoutHandler(h, rt.Timeout, "timeout")
			}
			h = wrap(h, g.Layers)
			mux.Handle(rt.Method+" "+param.ReplaceAllString(g.Prefix+rt.Path, "{$1}"), h)
		}
	}
	srv := httptest.NewUnstartedServer(recoverer(values(mux)))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// wrap wraps h in layers, the first outermost.
func wrap(h http.Handler, layers []*core.Layer) http.Handler {
	for i := len(layers) - 1; i >= 0; i-- {
		h = nethttp.ForLayer(layers[i])(h)
	}
	return h
}

// recoverer answers a panicking handler with 500.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// values copies the limittest value header into the request's context.
func values(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get(limittest.ValueHeader); v != "" {
			r = r.WithContext(context.WithValue(r.Context(), limittest.ValueKey, v)) //nolint:staticcheck // the suite's key is a string, as Echo's are
		}
		next.ServeHTTP(w, r)
	})
}
