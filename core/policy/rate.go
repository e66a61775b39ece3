package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core"
)

// rateUnits are the window names a rate may end with.
var rateUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

// ParseRate parses a quota and the window it counts in, as a tier's quota
// is written in a configuration: "100/min", "5000/hour", "10/s", or with a
// duration, "300/5m". The quota is a whole number from 1 to core.MaxQuota;
// the units are s (sec, second), m (min, minute), h (hour) and d (day);
// a duration is positive and a whole number of milliseconds.
func ParseRate(s string) (quota int64, window time.Duration, err error) {
	qs, ws, ok := strings.Cut(s, "/")
	qs, ws = strings.TrimSpace(qs), strings.TrimSpace(ws)
	if !ok || qs == "" || ws == "" {
		return 0, 0, fmt.Errorf("quota %q is not a quota per window, such as 100/min", s)
	}
	q, err := strconv.ParseInt(qs, 10, 64)
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("quota %q: %q is not a whole number", s, qs)
	case q < 1:
		return 0, 0, fmt.Errorf("quota %q: %d is below 1", s, q)
	case q > core.MaxQuota:
		return 0, 0, fmt.Errorf("quota %q: %d exceeds %d", s, q, core.MaxQuota)
	}
	if w, ok := rateUnits[strings.ToLower(ws)]; ok {
		return q, w, nil
	}
	w, err := time.ParseDuration(ws)
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("quota %q: %q is not a window: write s, min, hour, day or a duration such as 10s", s, ws)
	case w <= 0:
		return 0, 0, fmt.Errorf("quota %q: window %v is not positive", s, w)
	case w%time.Millisecond != 0:
		return 0, 0, fmt.Errorf("quota %q: window %v is not a whole number of milliseconds", s, w)
	}
	return q, w, nil
}

// isRate reports whether s is meant as a quota per window rather than a
// fraction: something follows its "/" that is not a plain number ("1/4"
// is a share, "100/min" and "100/1m" are quotas).
func isRate(s string) bool {
	_, ws, ok := strings.Cut(s, "/")
	if !ok {
		return false
	}
	_, err := strconv.ParseUint(strings.TrimSpace(ws), 10, 64)
	return err != nil
}
