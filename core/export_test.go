package core

// Test hooks: the header fields a layer renders for an adapter, as
// methods the external tests can call.

// Fields is a layer's rendered header fields.
type Fields struct {
	sp  fieldSpans
	buf []byte
}

// Fields renders d's header fields as an adapter would write them.
func (l *Layer) Fields(d *Decision) Fields {
	var f Fields
	var stack [256]byte
	if b := l.appendFields(stack[:0], d, &f.sp); len(b) > 0 {
		f.buf = append([]byte(nil), b...)
	}
	return f
}

// Len returns the number of fields.
func (f Fields) Len() int { return f.sp.N }

// Field returns the name and value of field i.
func (f Fields) Field(i int) (name, value string) {
	if f.sp.Static[i] != "" {
		return f.sp.Names[i], f.sp.Static[i]
	}
	return f.sp.Names[i], string(f.buf[f.sp.Start[i]:f.sp.End[i]])
}

// Static reports whether field i's value was used as pre-rendered, without
// formatting.
func (f Fields) Static(i int) bool { return f.sp.Static[i] != "" }

// Get returns the value of the named field, or "".
func (f Fields) Get(name string) string {
	for i := 0; i < f.sp.N; i++ {
		if n, v := f.Field(i); n == name {
			return v
		}
	}
	return ""
}

// Deny renders the layer's denial of d.
func (l *Layer) Deny(r *Request, d *Decision) Denial { return l.denial(r, d) }

// WouldDeny reports whether a shadow budget would have denied the request.
func (r *Result) WouldDeny() bool { return r.Shadow && !r.Allowed && !r.FailedOpen }
