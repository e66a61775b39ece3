package scale

import (
	"math"

	"github.com/quotagate/quotagate/core"
)

// Lowest returns a [core.Scaler] whose scale is the lowest of scalers':
// several rules on one budget, each free to lower its quota, none able to
// raise what another lowered. Use it to give a budget a Controller and a
// Scaler of your own, or two Controllers (one following CPU, one a
// schedule):
//
//	budget.Scale = scale.Lowest(cpu, myScaler)
//
// A scaler's factor of 1 or more, or one that is not a number, counts as
// 1 (as on a budget, see core.Scaler). Every scaler is asked on every
// call, so each Controller keeps updating. Lowest of no scaler is 1.
func Lowest(scalers ...core.Scaler) core.Scaler {
	return lowest(append([]core.Scaler(nil), scalers...))
}

type lowest []core.Scaler

// Scale implements [core.Scaler].
func (l lowest) Scale() float64 {
	f := 1.0
	for _, s := range l {
		if v := s.Scale(); v < f && !math.IsNaN(v) {
			f = v
		}
	}
	return f
}
