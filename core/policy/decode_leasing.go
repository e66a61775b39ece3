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
	if mn := n.field("max"); mn == nil {
		d.badf(n.at, "leasing has no max (the most units one lease may hold, e.g. max: 1000)")
	} else {
		b.Leasing.Max, _ = d.integer(mn, "leasing max", 1, core.MaxQuota)
	}
	if tn := n.field("ttl"); tn != nil {
		b.Leasing.TTL, _ = d.duration(tn, "leasing ttl")
	}
}
