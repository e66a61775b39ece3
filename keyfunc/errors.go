package keyfunc

// keyError is an error of a key function. Its message says what is wrong,
// once; it wraps the sentinels that sort it (ErrMalformed,
// ErrBadCredential, ErrUnsupportedValue, core.ErrNoKey) for errors.Is,
// without repeating their text.
type keyError struct {
	msg         string
	wraps       []error
	kind, where string // for core.KeyHinter; empty when unknown
}

func newKeyError(msg string, wraps ...error) error { return &keyError{msg: msg, wraps: wraps} }

func (e *keyError) Error() string { return e.msg }

func (e *keyError) Unwrap() []error { return e.wraps }

// KeyHint implements core.KeyHinter: which key the error is about and
// where the client should send it.
func (e *keyError) KeyHint() (kind, where string) { return e.kind, e.where }
