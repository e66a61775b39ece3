// Package e2e runs the examples' end-to-end tests: it builds an example's
// main package once per test process, starts it with flags and environment
// variables, waits for its "listening on HOST:PORT" line, talks to it over
// real HTTP connections on 127.0.0.1 (from any 127.0.0.0/8 source address,
// so tests can play several clients), and stops it with SIGTERM, checking
// that it exits 0. It also starts, kills and restarts throwaway Redis
// servers through internal/redistest, and helps tests that count requests
// in fixed windows stay inside one window.
//
// A test package using it calls [Main] from TestMain so that the binaries it
// built are removed at the end:
//
//	func TestMain(m *testing.M) { os.Exit(e2e.Main(m)) }
//
//	func TestExample(t *testing.T) {
//		bin := e2e.Build(t, "./nethttp")
//		p := e2e.Start(t, bin, e2e.Config{Env: []string{"PUBLIC_RATE_LIMIT=3"}})
//		resp := p.Client(t).Do(t, "GET", "/public/captcha", "")
//		...
//		p.Stop(t) // SIGTERM, exit status 0 (also checked at cleanup)
//	}
//
// Binaries are built without the race detector, so that servers answer as
// fast as they would in production; set QUOTAGATE_E2E_RACE=1 to build them
// with -race (a data race then makes the server exit non-zero, which Stop
// reports).
package e2e
