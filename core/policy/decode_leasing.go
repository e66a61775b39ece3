package policy

import (
	"fmt"

	"github.com/quotagate/quotagate/core"
)

var leasingFields = []string{"max", "ttl"}

// leasing reads a budget's leasing: {max: <int>, ttl: <duration>}, its
// core.Lease (not a concurrency budget's lease, which is a duration). Its
// problems are located at the field that has them.
func (d *decoder) leasing(n *node, b *core.Budget) {
	if !d.fields(n, fmt.Sprintf("budget %q's leasing", b.Name), leasingFields...) {
		return
	}
	switch b.Algorithm {
	case core.FixedWindow, core.SlidingWindow, core.TokenBucket:
	default:
		d.badf(n.at, "%s cannot be leased (only fixed_window, sliding_window and token_bucket)", b.Algorithm)
	}
	if mn := n.field("max"); mn == nil {
		d.badf(n.at, "leasing has no max (the most units one lease may hold, e.g. max: 1000)")
	} else {
		b.Leasing.Max, _ = d.integer(mn, "leasing max", 1, core.MaxQuota)
	}
	if tn := n.field("ttl"); tn != nil {
		if x, ok := d.duration(tn, "leasing ttl"); ok {
			if x < core.MinLeaseTTL || x > core.MaxLeaseTTL {
				d.badf(tn.at, "leasing ttl %v is outside [%v, %v]", x, core.MinLeaseTTL, core.MaxLeaseTTL)
			}
			b.Leasing.TTL = x
		}
	}
}
