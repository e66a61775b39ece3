package scale_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core/scale"
	"github.com/quotagate/quotagate/internal/fakeclock"
)

func TestParsePeriod(t *testing.T) {
	h := time.Hour
	weekdays := [7]bool{false, true, true, true, true, true, false}
	for _, c := range []struct {
		in, canon string
		days      [7]bool
		start     time.Duration
		end       time.Duration
	}{
		{"Mon-Fri 09:00-18:00", "Mon-Fri 09:00-18:00", weekdays, 9 * h, 18 * h},
		{"mon-FRI 09:00-18:00", "Mon-Fri 09:00-18:00", weekdays, 9 * h, 18 * h},
		{"Sat,Sun 00:00-24:00", "Sat-Sun 00:00-24:00", [7]bool{true, false, false, false, false, false, true}, 0, 24 * h},
		{"Fri-Mon 22:00-06:30", "Mon,Fri-Sun 22:00-06:30", [7]bool{true, true, false, false, false, true, true}, 22 * h, 6*h + 30*time.Minute},
		{"12:00-14:00", "12:00-14:00", [7]bool{true, true, true, true, true, true, true}, 12 * h, 14 * h},
		{"Mon-Sun 12:00-14:00", "12:00-14:00", [7]bool{true, true, true, true, true, true, true}, 12 * h, 14 * h},
		{"  Wed   08:15-08:45 ", "Wed 08:15-08:45", [7]bool{false, false, false, true}, 8*h + 15*time.Minute, 8*h + 45*time.Minute},
	} {
		p, err := scale.ParsePeriod(c.in)
		if err != nil {
			t.Errorf("ParsePeriod(%q): %v", c.in, err)
			continue
		}
		if p.Days != c.days || p.Start != c.start || p.End != c.end || p.Scale != 0 {
			t.Errorf("ParsePeriod(%q) = %+v", c.in, p)
		}
		if got := p.String(); got != c.canon {
			t.Errorf("ParsePeriod(%q).String() = %q, want %q", c.in, got, c.canon)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{"Mon-Fri", "no time range"},
		{"Mon 09:00", `time range "09:00" is not HH:MM-HH:MM`},
		{"Mon-Fri 9:00-18:00", `time "9:00" is not HH:MM`},
		{"Mon-Fri 09:00-18:60", `time "18:60" is not a time of day`},
		{"Mon-Fri 09:00-25:00", `time "25:00" is not a time of day`},
		{"Mon-Fri 24:00-06:00", "cannot start at 24:00"},
		{"Mon-Fri 09:00-09:00", "is empty"},
		{"Mon-Fry 09:00-18:00", `unknown day "Fry"`},
		{"Mon,,Fri 09:00-18:00", `unknown day ""`},
		{"Mon Fri 09:00-18:00", "not 3 words"},
		{"Mon-Fri 09:00-18:00 50%", "not 3 words"},
		{"Mon-Fri +9:00-18:00", `time "+9:00" is not HH:MM`},
	} {
		_, err := scale.ParsePeriod(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "quotagate: scale: period ") {
			t.Errorf("ParsePeriod(%q): err = %v, want one containing %q", c.in, err, c.want)
		}
	}
}

func FuzzParsePeriod(f *testing.F) {
	for _, s := range []string{"Mon-Fri 09:00-18:00", "Sat,Sun 00:00-24:00", "Fri-Mon 22:00-06:30", "12:00-14:00", "Sun-Sun 00:00-00:01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := scale.ParsePeriod(s)
		if err != nil {
			return
		}
		again, err := scale.ParsePeriod(p.String())
		if err != nil || again != p {
			t.Fatalf("ParsePeriod(%q) = %+v, written %q, read back %+v, %v", s, p, p.String(), again, err)
		}
		p.Scale = 0.5
		if _, err := scale.New(scale.Config{Schedule: []scale.Period{p}}); err != nil {
			t.Fatalf("ParsePeriod(%q) = %+v, which New refuses: %v", s, p, err)
		}
	})
}

// period parses s with scale f.
func period(t *testing.T, s string, f float64) scale.Period {
	t.Helper()
	p, err := scale.ParsePeriod(s)
	if err != nil {
		t.Fatal(err)
	}
	p.Scale = f
	return p
}

// TestScheduleBoundaries: a schedule's scale applies from the first
// update in its period to the first after, across weekdays, midnight and
// time zones; overlapping periods take the lowest.
func TestScheduleBoundaries(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	office := period(t, "Mon-Fri 09:00-18:00", 0.5)
	night := period(t, "Fri 22:00-06:00", 0.25)
	lunch := period(t, "12:00-14:00", 0.8)
	for _, c := range []struct {
		name string
		loc  *time.Location
		at   time.Time
		want float64
	}{
		{"Monday 08:59 UTC", nil, time.Date(2026, 11, 30, 8, 59, 59, 0, time.UTC), 1},
		{"Monday 09:00 UTC", nil, time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), 0.5},
		{"Monday 17:59 UTC", nil, time.Date(2026, 11, 30, 17, 59, 0, 0, time.UTC), 0.5},
		{"Monday 18:00 UTC", nil, time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC), 1},
		{"Monday 12:30 UTC, lunch within office hours", nil, time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC), 0.5},
		{"Saturday 12:30 UTC, lunch alone", nil, time.Date(2026, 12, 5, 12, 30, 0, 0, time.UTC), 0.8},
		{"Saturday 10:00 UTC", nil, time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC), 1},
		{"Friday 21:59 UTC", nil, time.Date(2026, 12, 4, 21, 59, 0, 0, time.UTC), 1},
		{"Friday 22:00 UTC", nil, time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC), 0.25},
		{"Saturday 00:00 UTC, past midnight", nil, time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC), 0.25},
		{"Saturday 05:59 UTC", nil, time.Date(2026, 12, 5, 5, 59, 0, 0, time.UTC), 0.25},
		{"Saturday 06:00 UTC", nil, time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC), 1},
		{"Thursday 23:00 UTC, no night period", nil, time.Date(2026, 12, 3, 23, 0, 0, 0, time.UTC), 1},
		{"Friday 02:00 UTC, the night after Thursday", nil, time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC), 1},
		{"Monday 08:30 UTC is 09:30 in Paris", paris, time.Date(2026, 11, 30, 8, 30, 0, 0, time.UTC), 0.5},
		{"Monday 17:30 UTC is 18:30 in Paris", paris, time.Date(2026, 11, 30, 17, 30, 0, 0, time.UTC), 1},
		{"Friday 21:30 UTC is 22:30 in Paris", paris, time.Date(2026, 12, 4, 21, 30, 0, 0, time.UTC), 0.25},
		{"Sunday 23:30 UTC is Monday 00:30 in Paris", paris, time.Date(2026, 12, 6, 23, 30, 0, 0, time.UTC), 1},
		{"Monday 08:00 UTC is 09:00 in Paris", paris, time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC), 0.5},
		{"summer: Monday 07:00 UTC is 09:00 in Paris", paris, time.Date(2026, 6, 1, 7, 0, 0, 0, time.UTC), 0.5},
	} {
		clk := fakeclock.New(c.at.Add(-time.Second))
		ctl := scale.MustNew(scale.Config{Schedule: []scale.Period{office, night, lunch}, Location: c.loc, Clock: clk})
		clk.Advance(time.Second)
		if got := ctl.Scale(); got != c.want {
			t.Errorf("%s: scale %v, want %v", c.name, got, c.want)
		}
		if st := ctl.Stats(); st.Scheduled != c.want {
			t.Errorf("%s: stats %+v, want scheduled %v", c.name, st, c.want)
		}
	}
}

// TestScheduleAndSignal: the scale is the lower of the schedule's and
// the signal's.
func TestScheduleAndSignal(t *testing.T) {
	p := &plant{demand: 150, capacity: 100}
	clk := fakeclock.New(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)) // Monday 08:00
	c := scale.MustNew(scale.Config{Signal: p.signal, Target: 0.7, Clock: clk,
		Schedule: []scale.Period{period(t, "Mon-Fri 09:00-18:00", 0.3)}})
	s := &sim{t: t, clk: clk, plant: p, c: c}
	p.inEffect = 1
	if got := s.run(40, scale.DefaultInterval); got[len(got)-1] != 0.5 {
		t.Fatalf("before the period: scale %v, want the signal's 0.5", got[len(got)-1])
	}
	clk.Set(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	if got := s.run(40, scale.DefaultInterval); reversals(got) != 0 || got[0] != 0.3 || got[len(got)-1] != 0.3 {
		t.Errorf("in the period: scales %v, want 0.3 throughout", got)
	}
	clk.Set(time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC))
	if got := s.run(40, scale.DefaultInterval); got[len(got)-1] != 0.5 {
		t.Errorf("after the period: scale %v, want the signal's 0.5 again", got[len(got)-1])
	}
}
