package core

import "github.com/quotagate/quotagate/internal/link"

// The request sequence of package core/adapter reaches the layer through
// package link (see its doc): what only adapters need stays out of core's
// exported API.
func init() {
	link.Begin = func(l *Layer, r *Request, d *Decision) link.Step { return l.begin(r, d) }
	link.End = func(l *Layer, r *Request, d *Decision, st link.Step, status int) { l.end(r, d, st, status) }
	link.Render = func(l *Layer, dst []byte, d *Decision, sp *link.Spans) []byte { return l.appendFields(dst, d, sp) }
	link.Deny = func(l *Layer, r *Request, d *Decision) Denial { return l.denial(r, d) }
	link.Counts = func(l *Layer) bool { return l.count != nil }
	link.Option = func(key, v any) LayerOption {
		return func(c *layerConfig) {
			if c.extra == nil {
				c.extra = map[any]any{}
			}
			c.extra[key] = v
		}
	}
	link.Value = func(l *Layer, key any) any { return l.extra[key] }
}
