package pacer_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/quotagate/quotagate/nethttp/pacer"
)

// BenchmarkTransport compares a GET over loopback through the bare
// http.Transport with the same GET through the quotagate Transport, whose
// server answers with two IETF policies to pace by (never exhausted).
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Policy", `"burst";q=1000000;w=1, "day";q=999999999;w=86400`)
		w.Header().Set("RateLimit", `"burst";r=999999;t=1, "day";r=999999998;t=52000`)
	}))
	defer srv.Close()
	base := srv.Client().Transport
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"base", base},
		{"quotagate", pacer.MustNew(pacer.Config{Base: base})},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req, _ := http.NewRequest("GET", srv.URL+"/", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tc.rt.RoundTrip(req)
				if err != nil || resp.StatusCode != 200 {
					b.Fatal(resp, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
}
