package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/core/memstore"
)

func TestQuickstartMetrics(t *testing.T) {
	store, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := newHandler(store)
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, h)
	for i := 0; i < 12; i++ {
		resp, err := http.Post(srv+"/items", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(srv + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`quotagate_decisions_total{budget="writes",outcome="allowed"} 10`,
		`quotagate_decisions_total{budget="writes",outcome="denied"} 2`,
		// per_ip had room for all twelve, but the inner writes layer
		// denied two: per_ip's allowed counts only what was let through.
		`quotagate_decisions_total{budget="per_ip",outcome="allowed"} 10`,
		`quotagate_decisions_total{budget="per_ip",outcome="denied_elsewhere"} 2`,
		`quotagate_refunds_total{budget="per_ip"} 2`,
		`quotagate_breaker_open{engine="quickstart"} 0`,
		`quotagate_memory_store_entries{store="memory"} 2`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func newServer(t *testing.T, h http.Handler) string {
	t.Helper()
	s := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return "http://" + ln.Addr().String()
}
