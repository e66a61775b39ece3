package sendapi

import (
	"io"
	"log/slog"
	"testing"

	"github.com/quotagate/quotagate/core/memstore"
)

// BenchmarkAuthenticate is the example's own work on every authenticated
// request: parsing the Authorization field and finding the credential by
// the key's keyed hash. (The layers' cost is benchmarked in core and the
// adapters.)
func BenchmarkAuthenticate(b *testing.B) {
	store := memstore.MustNew(memstore.Config{})
	b.Cleanup(func() { store.Close() })
	cfg, err := LoadConfig("bench", nil, func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	app, err := New(cfg, Deps{Store: store, Idempotency: NewMemoryIdempotency(0), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	lines := []string{"AccessKey ak_acme_1"}
	b.ReportAllocs()
	for b.Loop() {
		if c, _ := app.Authenticate(lines); c == nil {
			b.Fatal("not authenticated")
		}
	}
}

func BenchmarkParseIdempotencyKey(b *testing.B) {
	for _, c := range []struct{ name, v string }{
		{"bare", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"sf-string", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
	} {
		b.Run(c.name, func(b *testing.B) {
			lines := []string{c.v}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseIdempotencyKey(lines); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
