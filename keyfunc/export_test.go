package keyfunc

// Test hooks.

// SplitComposite splits a key made by [Composite] back into its parts, so
// tests can show composite keys are unambiguous. ok is false when key is
// not a well-formed composite key.
func SplitComposite(key string) (parts []string, ok bool) {
	var cur []byte
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case CompositeEscape:
			i++
			if i >= len(key) || (key[i] != CompositeEscape && key[i] != CompositeSeparator) {
				return nil, false
			}
			cur = append(cur, key[i])
		case CompositeSeparator:
			parts = append(parts, string(cur))
			cur = cur[:0]
		default:
			cur = append(cur, c)
		}
	}
	return append(parts, string(cur)), true
}
