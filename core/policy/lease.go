package policy

import (
	"fmt"

	"github.com/quotagate/quotagate/core"
)

var leaseFields = []string{"max", "ttl"}

// lease reads a budget's lease: {max: <int>, ttl: <duration>} (see
// core.Lease). Its problems are located at the field that has them.
func (d *decoder) lease(n *node, b *core.Budget) {
	if !d.fields(n, fmt.Sprintf("budget %q's lease", b.Name), leaseFields...) {
		return
	}
	switch b.Algorithm {
	case core.SlidingLog, core.LeakyBucket:
		d.badf(n.at, "%s cannot be leased (only fixed_window, sliding_window and token_bucket)", b.Algorithm)
	}
	if mn := n.field("max"); mn == nil {
		d.badf(n.at, "lease has no max (the most units one lease may hold, e.g. max: 1000)")
	} else {
		b.Lease.Max, _ = d.integer(mn, "lease max", 1, core.MaxQuota)
	}
	if tn := n.field("ttl"); tn != nil {
		if x, ok := d.duration(tn, "lease ttl"); ok {
			if x < core.MinLeaseTTL || x > core.MaxLeaseTTL {
				d.badf(tn.at, "lease ttl %v is outside [%v, %v]", x, core.MinLeaseTTL, core.MaxLeaseTTL)
			}
			b.Lease.TTL = x
		}
	}
}
