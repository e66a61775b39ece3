package inspect

// Test hooks.

// DenialsSeen returns how many denials r has recorded in all, including
// those its ring no longer holds.
func (r *Recent) DenialsSeen() uint64 { return r.denials.next.Load() }
