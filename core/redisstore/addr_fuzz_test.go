package redisstore

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics, and neither its errors, nor a parsed
// value's String, nor Quote ever show the password of a URL.
func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:6379", "redis://user:s3cret@10.0.0.5:6379/2", "rediss://:s3cret@h:6380",
		"10.0.0.1:7000,10.0.0.2:7000", "redis://:s3cret@h:1?addr=h2:1&addr=h3:1", "redis://:s3cret@h:1/x",
		"redis://:s3cret@h:1?dial_timeout=x", "redis://:s3cret@[::1]:1", ",", "", "redis://:%zz@h:1",
		"redis://h:1/0?pool_size=-5", "redis://h:1/0?pool_size=100000000", "redis://h:1/-1",
		"redis://h:1/0?password=s3cretQUERY", "redis://s3cretUSER:s3cret@h:1/0?bogus=s3cretQUERY",
		"redis://h:1?addr=h2:1&pool_size=-1&password=s3cretQUERY",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, err := ParseAddr(v)
		q := QuoteAddr(v)
		if err == nil {
			checkBounded(t, v, s)
		}
		u, uerr := url.Parse(strings.TrimSpace(v))
		if uerr != nil {
			return
		}
		checkQueryHidden(t, v, u, err, s, q)
		if u.User == nil {
			return
		}
		pw, ok := u.User.Password()
		if !ok || len(pw) < 4 || strings.Contains("xxxxx redis rediss cluster addr", pw) {
			return // too short to tell apart from the rest of the text
		}
		// The same value with another password of the same length: text
		// that holds pw there too comes from the messages, not the value
		// ("dis:" is in "redis://").
		other := *u
		other.User = url.UserPassword(u.User.Username(), strings.Repeat(filler(pw), len(pw)))
		s2, err2 := ParseAddr(other.String())
		shows := func(text, without string) bool { return strings.Count(text, pw) > strings.Count(without, pw) }
		if err != nil && shows(err.Error(), fmt.Sprint(err2)) {
			t.Errorf("ParseAddr(%q): error %q shows the password", v, err)
		}
		if err == nil && shows(s.String(), s2.String()) {
			t.Errorf("ParseAddr(%q).String() = %q shows the password", v, s)
		}
		if shows(q, QuoteAddr(other.String())) {
			t.Errorf("QuoteAddr(%q) = %s shows the password", v, q)
		}
	})
}

// filler returns a letter that pw does not hold.
func filler(pw string) string {
	for _, c := range "qzjxQZJX" {
		if !strings.ContainsRune(pw, c) {
			return string(c)
		}
	}
	return "0"
}

// checkBounded fails when an accepted address holds a connection count
// that would make go-redis panic or exhaust memory, or a negative
// database: ParseAddr must refuse those.
func checkBounded(t *testing.T, v string, s Addr) {
	t.Helper()
	var pool, minIdle, maxIdle, maxActive, db int
	if s.cluster != nil {
		o := s.cluster
		pool, minIdle, maxIdle, maxActive = o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns
	} else {
		o := s.single
		pool, minIdle, maxIdle, maxActive, db = o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns, o.DB
	}
	for _, n := range []int{pool, minIdle, maxIdle, maxActive} {
		if n < 0 || n > maxConns {
			t.Errorf("ParseAddr(%q) accepted a connection count of %d", v, n)
		}
	}
	if db < 0 {
		t.Errorf("ParseAddr(%q) accepted database %d", v, db)
	}
}

// checkQueryHidden fails when the value of a query parameter (which may be
// a password) shows in ParseAddr's error, the parsed value's String or
// QuoteAddr, beyond what the same address with that value replaced shows.
func checkQueryHidden(t *testing.T, v string, u *url.URL, err error, s Addr, q string) {
	t.Helper()
	for key, vals := range u.Query() {
		if key == "addr" {
			continue // cluster nodes are shown
		}
		for _, val := range vals {
			if len(val) < 6 || strings.Contains("xxxxx redis rediss cluster addr want unexpected option", val) {
				continue
			}
			other := withValue(v, key, val, strings.Repeat(filler(val), len(val)))
			s2, err2 := ParseAddr(other)
			shows := func(text, without string) bool { return strings.Count(text, val) > strings.Count(without, val) }
			if err != nil && shows(err.Error(), fmt.Sprint(err2)) {
				t.Errorf("ParseAddr(%q): error %q shows the query value %q", v, err, val)
			}
			if err == nil && shows(s.String(), s2.String()) {
				t.Errorf("ParseAddr(%q).String() = %q shows the query value %q", v, s, val)
			}
			if shows(q, QuoteAddr(other)) {
				t.Errorf("QuoteAddr(%q) = %s shows the query value %q", v, q, val)
			}
		}
	}
}

// withValue returns v, an address that url.Parse accepts, with each
// query parameter key=val given repl for its value, and every other byte
// as written: an address rebuilt by url.URL.String or url.Values.Encode
// may read differently (i000000s://?x=1 becomes i000000s:?x=1, and a
// comma in a key becomes %2C), so that ParseAddr's error for it would not
// show what the original's shows outside the value.
func withValue(v, key, val, repl string) string {
	v = strings.TrimSpace(v)
	end := len(v)
	if i := strings.IndexByte(v, '#'); i >= 0 {
		end = i
	}
	start := strings.IndexByte(v[:end], '?')
	if start < 0 {
		return v
	}
	parts := strings.Split(v[start+1:end], "&")
	for i, p := range parts {
		rk, rv, ok := strings.Cut(p, "=")
		k, kerr := url.QueryUnescape(rk)
		x, xerr := url.QueryUnescape(rv)
		if ok && kerr == nil && xerr == nil && k == key && x == val {
			parts[i] = rk + "=" + url.QueryEscape(repl)
		}
	}
	return v[:start+1] + strings.Join(parts, "&") + v[end:]
}
