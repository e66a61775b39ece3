package policy

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/quotagate/quotagate/core"
)

// Share is an exact fraction of a reference quota, such as a licence tier's
// 25%. It is a reduced fraction of integers, so scaling never suffers
// floating-point surprises: Percent(25).Scale(300) is exactly 75.
// The zero Share is invalid.
type Share struct {
	num, den uint64
}

// maxShareDen bounds a share's denominator: 18 decimal places.
const maxShareDen = 1_000_000_000_000_000_000

// MaxShare is the largest share accepted: a thousand times the reference.
const MaxShare = 1000

// Percent returns the share p/100. It panics when p is not positive or
// exceeds MaxShare×100; use ParseShare for values read at run time.
func Percent(p int64) Share {
	s, err := NewShare(p, 100)
	if err != nil {
		panic(err)
	}
	return s
}

// NewShare returns the share num/den, reduced. It must be positive and at
// most MaxShare.
func NewShare(num, den int64) (Share, error) {
	if num <= 0 || den <= 0 {
		return Share{}, fmt.Errorf("share %d/%d is not positive", num, den)
	}
	g := gcd(uint64(num), uint64(den))
	s := Share{num: uint64(num) / g, den: uint64(den) / g}
	if s.den > maxShareDen {
		return Share{}, fmt.Errorf("share %d/%d: denominator is too large", num, den)
	}
	if s.num/s.den > MaxShare || (s.num/s.den == MaxShare && s.num%s.den != 0) {
		return Share{}, fmt.Errorf("share %d/%d is more than %d times the reference", num, den, MaxShare)
	}
	return s, nil
}

var errShareSyntax = errors.New(`want a percentage ("25%"), a decimal ("0.25") or a fraction ("1/4")`)

// ParseShare parses a share written as a percentage ("25%", "12.5%"), a
// decimal ("0.25", "2") or a fraction ("1/4"), exactly.
func ParseShare(s string) (Share, error) {
	t := strings.TrimSpace(s)
	if t == "" || len(t) > 64 {
		return Share{}, fmt.Errorf("share %q: %w", s, errShareSyntax)
	}
	if a, b, ok := strings.Cut(t, "/"); ok {
		n, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
		d, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
		if err1 != nil || err2 != nil {
			return Share{}, fmt.Errorf("share %q: %w", s, errShareSyntax)
		}
		sh, err := NewShare(n, d)
		if err != nil {
			return Share{}, fmt.Errorf("share %q: %w", s, err)
		}
		return sh, nil
	}
	var scale int64 = 1
	if strings.HasSuffix(t, "%") {
		t = strings.TrimSpace(strings.TrimSuffix(t, "%"))
		scale = 100
	}
	num, den, ok := parseDecimal(t)
	if !ok {
		return Share{}, fmt.Errorf("share %q: %w", s, errShareSyntax)
	}
	hi, lo := bits.Mul64(uint64(den), uint64(scale))
	if hi != 0 || lo > 1<<62 {
		return Share{}, fmt.Errorf("share %q: too many decimal places", s)
	}
	sh, err := NewShare(num, int64(lo))
	if err != nil {
		return Share{}, fmt.Errorf("share %q: %w", s, err)
	}
	return sh, nil
}

// parseDecimal parses an unsigned decimal "123", "0.25", ".5" or "2." into
// num/den with den a power of ten.
func parseDecimal(t string) (num, den int64, ok bool) {
	intPart, frac, _ := strings.Cut(t, ".")
	if intPart == "" && frac == "" {
		return 0, 0, false
	}
	if len(frac) > 16 {
		return 0, 0, false
	}
	den = 1
	for range len(frac) {
		den *= 10
	}
	digits := intPart + frac
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, 0, false
		}
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return 0, den, true
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return n, den, true
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// IsZero reports whether s is the zero (invalid) Share.
func (s Share) IsZero() bool { return s.den == 0 }

// Fraction returns s as num/den in lowest terms.
func (s Share) Fraction() (num, den int64) { return int64(s.num), int64(s.den) }

// String returns s as a percentage when that is exact ("25%", "12.5%"),
// otherwise as a fraction ("1/3").
func (s Share) String() string {
	if s.den == 0 {
		return "0%"
	}
	// s×100 = whole + rest/den.
	hi, lo := bits.Mul64(s.num, 100)
	if hi == 0 {
		whole, rest := lo/s.den, lo%s.den
		if rest == 0 {
			return strconv.FormatUint(whole, 10) + "%"
		}
		// Up to 6 decimal places when they are exact.
		var frac []byte
		for range 6 {
			rest *= 10
			frac = append(frac, byte('0'+rest/s.den))
			rest %= s.den
			if rest == 0 {
				return strconv.FormatUint(whole, 10) + "." + string(frac) + "%"
			}
		}
	}
	return strconv.FormatUint(s.num, 10) + "/" + strconv.FormatUint(s.den, 10)
}

// Scale returns reference × s, rounded up, never below 1 and never above
// core.MaxQuota: 300 at 25% is 75, 5 at 25% is 2 (1.25 rounded up). The
// arithmetic is exact for every reference up to core.MaxQuota.
// A zero Share scales to 1.
func (s Share) Scale(reference int64) int64 {
	if reference <= 0 || s.den == 0 {
		return 1
	}
	hi, lo := bits.Mul64(uint64(reference), s.num)
	if hi >= s.den {
		return core.MaxQuota
	}
	q, r := bits.Div64(hi, lo, s.den)
	if r != 0 {
		q++
	}
	switch {
	case q < 1:
		return 1
	case q > core.MaxQuota:
		return core.MaxQuota
	}
	return int64(q)
}
