package scale

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Period is a part of the week in which a schedule lowers the scale: the
// days it starts on, a time of day it starts at and one it ends at, and
// the scale it sets meanwhile. A Period whose End is not after its Start
// crosses midnight: "Fri 22:00-06:00" runs from Friday 22:00 to Saturday
// 06:00.
type Period struct {
	// Days are the days the period starts on, indexed by time.Weekday
	// (Days[time.Monday] is Monday). At least one.
	Days [7]bool
	// Start is the time of day the period starts at, from midnight: a
	// whole number of minutes in [0, 24h).
	Start time.Duration
	// End is the time of day the period ends at, from midnight: a whole
	// number of minutes in [0, 24h], not equal to Start. An End before
	// Start is on the next day (so 00:00 and 24:00 both end the period at
	// midnight).
	End time.Duration
	// Scale is the scale during the period, in (0, 1].
	Scale float64
}

var dayNames = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// ParsePeriod returns the period that s describes: days, then a time
// range, as in "Mon-Fri 09:00-18:00", "Sat,Sun 00:00-24:00" or
// "Fri 22:00-06:00" (past midnight, into Saturday). Days are three-letter
// English names, case-insensitive, single or as ranges ("Fri-Mon" wraps
// over the weekend), separated by commas; without days the period starts
// every day ("12:00-14:00"). Times are HH:MM on a 24-hour clock; an end
// of 24:00 is midnight at the end of the day. The returned Period's Scale
// is 0: the caller sets it. [Period.String] writes what ParsePeriod reads.
func ParsePeriod(s string) (Period, error) {
	p, err := parsePeriod(s)
	if err != nil {
		return Period{}, fmt.Errorf("quotagate: scale: period %q: %w", s, err)
	}
	return p, nil
}

func parsePeriod(s string) (Period, error) {
	var p Period
	fields := strings.Fields(s)
	var days, times string
	switch len(fields) {
	case 0:
		return p, fmt.Errorf("empty; want days and a time range, as in \"Mon-Fri 09:00-18:00\"")
	case 1:
		if !strings.Contains(fields[0], ":") {
			return p, fmt.Errorf("no time range; want days and a time range, as in \"Mon-Fri 09:00-18:00\"")
		}
		times = fields[0]
		for i := range p.Days {
			p.Days[i] = true
		}
	case 2:
		days, times = fields[0], fields[1]
	default:
		return p, fmt.Errorf("want days and a time range, as in \"Mon-Fri 09:00-18:00\", not %d words", len(fields))
	}
	if days != "" {
		for part := range strings.SplitSeq(days, ",") {
			if err := addDays(&p.Days, part); err != nil {
				return p, err
			}
		}
	}
	from, to, ok := strings.Cut(times, "-")
	if !ok {
		return p, fmt.Errorf("time range %q is not HH:MM-HH:MM", times)
	}
	var err error
	if p.Start, err = parseClock(from, false); err != nil {
		return p, err
	}
	if p.End, err = parseClock(to, true); err != nil {
		return p, err
	}
	if p.Start == p.End {
		return p, fmt.Errorf("time range %q is empty (start and end are the same)", times)
	}
	return p, nil
}

// addDays sets the days that part names: "Mon" or "Mon-Fri".
func addDays(days *[7]bool, part string) error {
	from, to, isRange := strings.Cut(part, "-")
	a, err := parseDay(from)
	if err != nil {
		return err
	}
	b := a
	if isRange {
		if b, err = parseDay(to); err != nil {
			return err
		}
	}
	for d := a; ; d = (d + 1) % 7 {
		days[d] = true
		if d == b {
			return nil
		}
	}
}

// parseDay returns the weekday named s, a three-letter English name.
func parseDay(s string) (time.Weekday, error) {
	for i, n := range dayNames {
		if strings.EqualFold(s, n) {
			return time.Weekday(i), nil
		}
	}
	return 0, fmt.Errorf("unknown day %q (want Mon, Tue, Wed, Thu, Fri, Sat or Sun)", s)
}

// parseClock returns the time of day s (HH:MM) as a duration from
// midnight; 24:00 only for an end.
func parseClock(s string, end bool) (time.Duration, error) {
	hh, mm, ok := strings.Cut(s, ":")
	if !ok || len(hh) != 2 || len(mm) != 2 {
		return 0, fmt.Errorf("time %q is not HH:MM", s)
	}
	h, err1 := strconv.ParseUint(hh, 10, 8)
	m, err2 := strconv.ParseUint(mm, 10, 8)
	switch {
	case err1 != nil || err2 != nil:
		return 0, fmt.Errorf("time %q is not HH:MM", s)
	case m > 59 || h > 24 || h == 24 && m != 0:
		return 0, fmt.Errorf("time %q is not a time of day", s)
	case h == 24 && !end:
		return 0, fmt.Errorf("time %q: a period cannot start at 24:00 (start at 00:00)", s)
	}
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute, nil
}

// String returns the period as [ParsePeriod] reads it, without the
// scale: "Mon-Fri 09:00-18:00", days in order from Monday, with no days
// written when it starts every day.
func (p Period) String() string {
	var b strings.Builder
	order := [7]time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}
	all := true
	for i := 0; i < 7; {
		if !p.Days[order[i]] {
			all = false
			i++
			continue
		}
		j := i
		for j+1 < 7 && p.Days[order[j+1]] {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(dayNames[order[i]])
		if j > i {
			b.WriteByte('-')
			b.WriteString(dayNames[order[j]])
		}
		i = j + 1
	}
	if all {
		b.Reset()
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	fmt.Fprintf(&b, "%s-%s", clock(p.Start), clock(p.End))
	return b.String()
}

// clock writes d, a time of day, as HH:MM.
func clock(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// problems lists what is wrong with p.
func (p Period) problems() []string {
	var bad []string
	if p.Days == [7]bool{} {
		bad = append(bad, "no days")
	}
	if p.Start < 0 || p.Start >= 24*time.Hour || p.Start%time.Minute != 0 {
		bad = append(bad, fmt.Sprintf("start %v is not a whole minute in [0, 24h)", p.Start))
	}
	if p.End < 0 || p.End > 24*time.Hour || p.End%time.Minute != 0 {
		bad = append(bad, fmt.Sprintf("end %v is not a whole minute in [0, 24h]", p.End))
	}
	if p.Start == p.End {
		bad = append(bad, "start and end are the same")
	}
	if !(p.Scale > 0 && p.Scale <= 1) {
		bad = append(bad, fmt.Sprintf("scale %v is outside (0, 1]", p.Scale))
	}
	return bad
}

// covers reports whether the period holds t, read in t's location.
func (p Period) covers(t time.Time) bool {
	// The clock's reading, not the time since midnight, which a change
	// to or from daylight saving time makes an hour longer or shorter.
	h, m, sec := t.Clock()
	tod := time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second + time.Duration(t.Nanosecond())
	day := t.Weekday()
	if p.Start < p.End {
		return p.Days[day] && tod >= p.Start && tod < p.End
	}
	// Past midnight: from Start to the end of a listed day, then to End
	// on the day after.
	return p.Days[day] && tod >= p.Start || p.Days[(day+6)%7] && tod < p.End
}
