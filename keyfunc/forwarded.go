package keyfunc

import (
	"strings"
	"sync"
)

// This file holds the parsers of forwarding headers. Each feeds the entries
// of one field line, right to left, to a walk, and stops when the walk is
// done; none allocates unless a Forwarded value uses quoted-pair escapes.

// scanXFF feeds the entries of one X-Forwarded-For field line to w. Empty
// list elements are ignored (RFC 9110 §5.6.1).
func scanXFF(s string, w *walk) {
	for s != "" && !w.done {
		var el string
		if i := strings.LastIndexByte(s, ','); i >= 0 {
			s, el = s[:i], s[i+1:]
		} else {
			s, el = "", s
		}
		el = trimOWS(el)
		if el == "" {
			continue
		}
		w.add(splitHost(el, false))
	}
}

// scanSingle feeds the value of a single-address header line to w. An empty
// value feeds nothing; a list of addresses is malformed.
func scanSingle(s string, w *walk) {
	s = trimOWS(s)
	if s == "" {
		return
	}
	if strings.IndexByte(s, ',') >= 0 {
		w.add("", false)
		return
	}
	w.add(splitHost(s, false))
}

// scanForwarded feeds the for= node of every element of one RFC 7239
// Forwarded field line to w:
//
//	Forwarded         = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//
// An element without exactly one for= pair, with a syntax error, or whose
// node is "unknown", obfuscated ("_hidden") or not an address is fed as
// unparsable. Parsing resumes at the next comma outside a quoted string; an
// unterminated quoted string makes the rest of the line one bad element.
// Field lines are parsed separately, so a client cannot make a quote it
// sends swallow an element a proxy appended on a line of its own.
//
// Unquoted values are accepted up to the next whitespace, ";" or ",", so a
// proxy that forgets to quote "[2001:db8::1]:80" is still understood;
// IPv6 nodes must be bracketed.
func scanForwarded(s string, w *walk) {
	if strings.IndexByte(s, '"') < 0 {
		// No quoted string: every comma ends an element.
		for s != "" && !w.done {
			var el string
			if i := strings.LastIndexByte(s, ','); i >= 0 {
				s, el = s[:i], s[i+1:]
			} else {
				s, el = "", s
			}
			if skipOWS(el, 0) < len(el) { // not an empty element
				w.add(forwardedNode(el))
			}
		}
		return
	}
	// Where an element ends depends on the quoted strings before it, so
	// the elements are found left to right, a byte scan; their nodes are
	// then parsed from the right, only until the walk is done.
	ends := endsPool.Get().(*[]int)
	cuts := (*ends)[:0]
	for i := 0; i < len(s); i++ {
		i = skipElement(s, i)
		cuts = append(cuts, i)
	}
	for j := len(cuts) - 1; j >= 0 && !w.done; j-- {
		start := 0
		if j > 0 {
			start = cuts[j-1] + 1
		}
		el := s[start:cuts[j]]
		if skipOWS(el, 0) == len(el) {
			continue // an empty element
		}
		w.add(forwardedNode(el))
	}
	*ends = cuts
	endsPool.Put(ends)
}

// endsPool holds the element ends of Forwarded lines being scanned.
var endsPool = sync.Pool{New: func() any { return new([]int) }}

// forwardedNode returns the address text of the for= node of one Forwarded
// element (a line's text between two commas outside quoted strings), and
// false when the element is not exactly one for= pair and other valid
// pairs, or its node carries no address.
func forwardedNode(s string) (string, bool) {
	var node string
	nodeOK, found := false, false
	i := 0
	for {
		i = skipOWS(s, i)
		if i >= len(s) {
			return node, found && nodeOK
		}
		if s[i] == ';' { // empty pair
			i++
			continue
		}
		start := i
		for i < len(s) && isTchar(s[i]) {
			i++
		}
		name := s[start:i]
		if name == "" || i >= len(s) || s[i] != '=' {
			return "", false
		}
		i++
		var val string
		if i < len(s) && s[i] == '"' {
			v, end, ok := quotedString(s, i)
			if !ok {
				return "", false
			}
			val, i = v, end
		} else {
			start := i
			for i < len(s) && !isOWS(s[i]) && s[i] != ';' && s[i] != '"' {
				i++
			}
			val = s[start:i]
			if val == "" {
				return "", false
			}
		}
		if asciiEqualFold(name, "for") {
			if found { // a parameter occurs at most once per element
				return "", false
			}
			found = true
			node, nodeOK = forNode(val)
		}
		i = skipOWS(s, i)
		if i < len(s) && s[i] != ';' {
			return "", false
		}
	}
}

// forNode returns the address text of a Forwarded node:
//
//	node     = nodename [ ":" node-port ]
//	nodename = IPv4address / "[" IPv6address "]" / "unknown" / obfnode
//
// "unknown" and obfuscated names carry no address and are not ok.
func forNode(v string) (string, bool) {
	if v == "" || v[0] == '_' || asciiEqualFold(v, "unknown") {
		return "", false
	}
	if v[0] == '[' {
		return splitHost(v, true)
	}
	i := strings.IndexByte(v, ':')
	if i < 0 {
		return v, true
	}
	if !isPort(v[i+1:], true) {
		return "", false // an unbracketed IPv6 address, or a bad port
	}
	return v[:i], true
}

// quotedString parses the quoted-string starting at s[i] == '"'. It returns
// its content (unescaped), the index after the closing quote, and false when
// the string is unterminated or holds a control character.
func quotedString(s string, i int) (string, int, bool) {
	escaped := false
	for j := i + 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '"':
			if escaped {
				return unescape(s[i+1 : j]), j + 1, true
			}
			return s[i+1 : j], j + 1, true
		case c == '\\':
			j++
			if j >= len(s) || (s[j] < 0x20 && s[j] != '\t') || s[j] == 0x7f {
				return "", i, false
			}
			escaped = true
		case c < 0x20 && c != '\t', c == 0x7f:
			return "", i, false
		}
	}
	return "", i, false
}

// unescape removes the backslashes of quoted-pairs.
func unescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// skipElement returns the index of the next comma at or after i that is not
// inside a quoted string, or len(s).
func skipElement(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ',':
			return i
		case '"':
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(s) {
				return len(s)
			}
		}
		i++
	}
	return len(s)
}

func skipOWS(s string, i int) int {
	for i < len(s) && isOWS(s[i]) {
		i++
	}
	return i
}
