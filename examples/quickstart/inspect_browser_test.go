package main

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/examples/internal/e2e"
)

func TestMain(m *testing.M) { os.Exit(e2e.Main(m)) }

// chromium returns the path of a Chromium binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it): skipping the browser test of /debug/quotagate")
	return ""
}

// headless runs Chromium on url with a fresh profile and extra flags
// (--dump-dom, --screenshot=...) and returns its standard output.
func headless(t *testing.T, bin, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir=" + t.TempDir()}
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// TestInspectionPageInChromium starts the quickstart, spends a client's
// write budget until it is denied, and has a real Chromium look that
// client's key up on /debug/quotagate (the page's GET form puts the key in
// the query), checking the DOM and a screenshot. The budgets are one-minute
// fixed windows: when the window ends before the screenshot is taken (a
// slow machine), it runs again in a fresh window.
func TestInspectionPageInChromium(t *testing.T) {
	bin := chromium(t)
	p := e2e.Start(t, e2e.Build(t, "."), e2e.Config{})
	win := e2e.AwaitWindow(t, time.Minute, 30*time.Second)
	for attempt, ip := range []string{"127.0.0.9", "127.0.0.10"} {
		if attempt > 0 {
			t.Logf("the window ended before the checks did; again in a fresh window")
			win = e2e.AwaitFresh(t, time.Minute, 30*time.Second)
		}
		dom, img := lookUp(t, bin, p, ip)
		if win.Ended() {
			continue
		}
		checkDOM(t, dom, ip)
		checkScreenshot(t, img)
		return
	}
	t.Fatal("the machine is too slow: two one-minute windows ended before Chromium answered")
}

// lookUp spends ip's write budget (10 allowed, 2 denied), then has
// Chromium load the page with ip looked up, and returns its DOM and a
// screenshot.
func lookUp(t *testing.T, bin string, p *e2e.Process, ip string) (string, image.Image) {
	t.Helper()
	rs, err := p.ClientFrom(t, ip).Repeat(12, 1, "POST", "/items", "")
	if err != nil {
		t.Fatal(err)
	}
	if st := e2e.Statuses(rs); st[201] != 10 || st[429] != 2 {
		t.Fatalf("12 writes from %s: %v, want 10×201 and 2×429", ip, st)
	}
	url := debugURL(t, p) + "?key=" + ip
	dom := string(headless(t, bin, url, "--dump-dom"))
	shot := filepath.Join(t.TempDir(), "inspect.png")
	headless(t, bin, url, "--screenshot="+shot, "--window-size=1100,1000")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	if keep := os.Getenv("QUOTAGATE_SCREENSHOT"); keep != "" {
		_ = os.WriteFile(keep, b, 0o644)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return dom, img
}

// checkDOM checks the page after ip's lookup: the form holding the key,
// each budget's row for the key, the budgets, and both denials.
func checkDOM(t *testing.T, dom, ip string) {
	t.Helper()
	q := regexp.QuoteMeta(ip)
	for _, re := range []string{
		`<form method="get" action="">`,
		`<input type="text" name="key" id="key" [^>]*value="` + q + `"`,
		// per_ip counted the 10 admitted writes (the 2 denied were refunded).
		`<tr><td><code>per_ip</code></td><td class="mono">` + q + `</td><td class="n">60</td><td class="n"></td>\s*<td class="n">50</td><td class="n">[0-9.ms]+</td>`,
		`<tr><td><code>writes</code></td><td class="mono">` + q + `</td><td class="n">10</td><td class="n"></td>\s*<td class="n low">0</td><td class="n">[0-9.ms]+</td>`,
		`<code>per_ip</code></td><td>fixed_window</td><td class="n">60</td><td class="n scale"></td><td>1m0s</td>`,
		`<code>writes</code></td><td>fixed_window</td><td class="n">10</td>`,
		// The layers (per_ip is layer #0, writes #1) and the routes seen
		// spending each budget: only POST /items was requested.
		`<td>ip</td><td>fail_open</td><td>#0</td>\s*<td class="mono">POST /items</td>`,
		`<td>ip</td><td>fail_open</td><td>#1</td>\s*<td class="mono">POST /items</td>`,
		`id="breaker">closed`,
		// Both denials, with the client's key, its route and the budget.
		`(?s)<table id="denials">.*writes</code></td><td>rate_limited</td><td class="mono"><a href="\?key=` + q + `">` + q + `</a></td><td class="mono">POST /items</td>.*writes</code></td><td>rate_limited`,
	} {
		if !regexp.MustCompile(re).MatchString(dom) {
			t.Errorf("the page's DOM lacks %s\n%s", re, dom)
		}
	}
}

// checkScreenshot checks that the page rendered: mostly white, with dark
// text, the green "closed" breaker and the red 0 of the exhausted budget.
func checkScreenshot(t *testing.T, img image.Image) {
	t.Helper()
	bounds := img.Bounds()
	if bounds.Dx() != 1100 || bounds.Dy() != 1000 {
		t.Errorf("screenshot is %v, want 1100×1000", bounds.Size())
	}
	var white, dark, red, green int
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			r, g, b = r>>8, g>>8, b>>8
			switch {
			case r > 245 && g > 245 && b > 245:
				white++
			case r < 80 && g < 80 && b < 90:
				dark++
			case r > 150 && g < 70 && b < 70:
				red++ // #b3261e
			case r < 60 && g > 90 && b < 90 && g > r+40:
				green++ // #17733a
			}
		}
	}
	total := bounds.Dx() * bounds.Dy()
	t.Logf("screenshot: %d white, %d dark, %d red, %d green pixels of %d", white, dark, red, green, total)
	if white < total/2 || dark < 2000 {
		t.Errorf("the screenshot does not look like a rendered page: %d white, %d dark of %d pixels", white, dark, total)
	}
	if red < 20 {
		t.Errorf("no red in the screenshot: the exhausted budget's remaining 0 is not shown (%d red pixels)", red)
	}
	if green < 20 {
		t.Errorf("no green in the screenshot: the closed breaker is not shown (%d green pixels)", green)
	}
}

// debugURL returns the inspection page's URL, which the quickstart prints
// after its listening line.
func debugURL(t *testing.T, p *e2e.Process) string {
	t.Helper()
	const prefix = "inspection page (loopback only): "
	for _, line := range e2e.Lines(p.Stdout()) {
		if u, ok := strings.CutPrefix(line, prefix); ok {
			return u
		}
	}
	t.Fatalf("the quickstart printed no %q line; stdout:\n%s", prefix, p.Stdout())
	return ""
}
