package policy

import (
	"math/bits"
	"testing"

	"github.com/quotagate/quotagate/core"
)

func TestShareScaleSeedArithmetic(t *testing.T) {
	quarter := Percent(25)
	for _, tc := range []struct {
		ref, want int64
	}{
		{300, 75}, // t_mutate at small: 75 writes a minute
		{5, 2},    // 1.25 rounds up to 2, not 1
		{30, 8},   // 7.5 → 8
		{600, 150},
		{10, 3},
		{4, 1},
		{1, 1}, // never zero
		{3, 1}, // 0.75 → 1
		{core.MaxQuota, 249_999_999_999_999 + 1},
	} {
		if got := quarter.Scale(tc.ref); got != tc.want {
			t.Errorf("25%% of %d = %d, want %d", tc.ref, got, tc.want)
		}
	}
}

func TestShareScaleExact(t *testing.T) {
	// Values where float64 arithmetic goes wrong: 0.07 × 100 = 7.000000000000001
	// in floating point, which a ceiling turns into 8.
	sh, err := ParseShare("0.07")
	if err != nil {
		t.Fatal(err)
	}
	if got := sh.Scale(100); got != 7 {
		t.Fatalf("0.07 × 100 = %d, want 7", got)
	}
	sh, _ = ParseShare("1/3")
	if got := sh.Scale(300); got != 100 {
		t.Fatalf("1/3 × 300 = %d, want 100", got)
	}
	if got := sh.Scale(301); got != 101 {
		t.Fatalf("1/3 × 301 = %d, want 101", got)
	}
	// Large reference with a share above one: clamps at MaxQuota.
	if got := Percent(400).Scale(core.MaxQuota); got != core.MaxQuota {
		t.Fatalf("400%% of MaxQuota = %d, want clamp to %d", got, int64(core.MaxQuota))
	}
	// Large exact product: 999,999,999,999,999 × 1/3 = 333,333,333,333,333.
	if got := sh.Scale(core.MaxQuota); got != 333_333_333_333_333 {
		t.Fatalf("1/3 of MaxQuota = %d", got)
	}
	if got := (Share{}).Scale(100); got != 1 {
		t.Fatalf("zero share scales to %d, want 1", got)
	}
}

func TestParseShare(t *testing.T) {
	for _, tc := range []struct {
		in      string
		num     int64
		den     int64
		str     string
		wantErr bool
	}{
		{in: "25%", num: 1, den: 4, str: "25%"},
		{in: "0.25", num: 1, den: 4, str: "25%"},
		{in: "1/4", num: 1, den: 4, str: "25%"},
		{in: " 12.5 % ", num: 1, den: 8, str: "12.5%"},
		{in: "2", num: 2, den: 1, str: "200%"},
		{in: "400%", num: 4, den: 1, str: "400%"},
		{in: ".5", num: 1, den: 2, str: "50%"},
		{in: "1/3", num: 1, den: 3, str: "1/3"},
		{in: "0.0001%", num: 1, den: 1_000_000, str: "0.0001%"},
		{in: "1000", num: 1000, den: 1, str: "100000%"},
		{in: "0", wantErr: true},
		{in: "0%", wantErr: true},
		{in: "-25%", wantErr: true},
		{in: "1001", wantErr: true},
		{in: "1/0", wantErr: true},
		{in: "abc", wantErr: true},
		{in: "", wantErr: true},
		{in: "25%%", wantErr: true},
		{in: ".", wantErr: true},
		{in: "1e2", wantErr: true},
		{in: "0.12345678901234567", wantErr: true},
	} {
		sh, err := ParseShare(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseShare(%q) = %v, want an error", tc.in, sh)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseShare(%q): %v", tc.in, err)
			continue
		}
		if n, d := sh.Fraction(); n != tc.num || d != tc.den {
			t.Errorf("ParseShare(%q) = %d/%d, want %d/%d", tc.in, n, d, tc.num, tc.den)
		}
		if s := sh.String(); s != tc.str {
			t.Errorf("ParseShare(%q).String() = %q, want %q", tc.in, s, tc.str)
		}
	}
}

func FuzzParseShare(f *testing.F) {
	for _, s := range []string{"25%", "0.25", "1/4", "12.5%", "1/3", "400%", "0.07", "999/1000", "1000"} {
		f.Add(s, int64(300))
	}
	f.Fuzz(func(t *testing.T, s string, ref int64) {
		sh, err := ParseShare(s)
		if err != nil {
			return
		}
		if sh.IsZero() {
			t.Fatalf("ParseShare(%q) returned a zero share without error", s)
		}
		// String round-trips.
		back, err := ParseShare(sh.String())
		if err != nil || back != sh {
			t.Fatalf("ParseShare(%q) = %v; String %q parses to %v, %v", s, sh, sh.String(), back, err)
		}
		if ref < 1 || ref > core.MaxQuota {
			return
		}
		got := sh.Scale(ref)
		if got < 1 || got > core.MaxQuota {
			t.Fatalf("%v × %d = %d, out of range", sh, ref, got)
		}
		// got is the ceiling: got-1 < ref×num/den <= got unless clamped.
		n, d := sh.Fraction()
		if got > 1 && got < core.MaxQuota {
			// (got-1)×den < ref×num <= got×den
			if !mulLT(got-1, d, ref, n) || mulLT(got, d, ref, n) {
				t.Fatalf("%v × %d = %d is not the ceiling", sh, ref, got)
			}
		}
		if got2 := sh.Scale(ref + 1); ref < core.MaxQuota && got2 < got {
			t.Fatalf("scaling is not monotone: %d → %d, %d → %d", ref, got, ref+1, got2)
		}
	})
}

// mulLT reports a×b < c×d, in 128 bits.
func mulLT(a, b, c, d int64) bool {
	x, y := mul128(a, b), mul128(c, d)
	return x[0] < y[0] || x[0] == y[0] && x[1] < y[1]
}

func mul128(a, b int64) [2]uint64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return [2]uint64{hi, lo}
}
