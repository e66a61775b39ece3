package limittest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/limittest"
	"github.com/quotagate/quotagate/nethttp"
)

// An adapter's conformance test: a ServeFunc that builds a real server for
// the suite's route table, here with net/http and package nethttp.
func Example() {
	param := regexp.MustCompile(`:([A-Za-z0-9_]+)`)
	serve := func(t *testing.T, app limittest.App) string {
		mux := http.NewServeMux()
		for _, g := range app.Groups {
			for _, rt := range g.Routes {
				var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					body := rt.Handle()
					w.Header().Set("Content-Type", "text/plain; charset=utf-8")
					_, _ = io.WriteString(w, body)
				})
				layers := append(append([]*core.Layer(nil), g.Layers...), rt.Layers...)
				for i := len(layers) - 1; i >= 0; i-- {
					h = nethttp.ForLayer(layers[i])(h)
				}
				mux.Handle(rt.Method+" "+param.ReplaceAllString(g.Prefix+rt.Path, "{$1}"), h)
			}
		}
		root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if recover() != nil {
					w.WriteHeader(http.StatusInternalServerError)
				}
			}()
			if v := r.Header.Get(limittest.ValueHeader); v != "" {
				r = r.WithContext(context.WithValue(r.Context(), limittest.ValueKey, v))
			}
			mux.ServeHTTP(w, r)
		})
		srv := httptest.NewServer(root)
		t.Cleanup(srv.Close)
		return srv.URL
	}

	// In the adapter's _test.go file:
	//
	//	func TestConformance(t *testing.T) {
	//		limittest.Run(t, limittest.Config{Serve: serve})
	//	}
	_ = limittest.Config{Serve: serve}
}
