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
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, err := ParseAddr(v)
		q := QuoteAddr(v)
		u, uerr := url.Parse(strings.TrimSpace(v))
		if uerr != nil || u.User == nil {
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
