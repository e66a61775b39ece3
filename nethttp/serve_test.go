package nethttp_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/slowpeer"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// TestServeSlowClients: the README's first limit, served by an
// http.Server with timeouts as the README shows, answers or closes slow
// and silent clients within them (slowpeer.Check).
func TestServeSlowClients(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	slowpeer.Check(t, slowpeer.ServeHTTP(t, nethttp.LimitBy(100, time.Minute, keyfunc.PeerIP())(mux)))
}
