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

// EntriesParsed returns how many entries of lines (the values of a header
// of src) the client address walk parses, with k's trusted proxies.
func EntriesParsed(k *IPKey, src Source, lines ...string) int {
	w := walk{k: k}
	for i := len(lines) - 1; i >= 0 && !w.done; i-- {
		if src.kind == srcForwarded {
			scanForwarded(lines[i], &w)
		} else {
			scanXFF(lines[i], &w)
		}
	}
	return w.n
}
