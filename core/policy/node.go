package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A configuration document, YAML or JSON, is read into a tree of nodes that
// remember where they came from, so every problem can name its location.

type nodeKind int

const (
	kindNull nodeKind = iota
	kindScalar
	kindMap
	kindSeq
)

func (k nodeKind) String() string {
	switch k {
	case kindScalar:
		return "a value"
	case kindMap:
		return "a mapping"
	case kindSeq:
		return "a list"
	}
	return "null"
}

type node struct {
	kind  nodeKind
	text  string  // scalar text
	keys  []*node // mapping keys (scalars), in document order
	vals  []*node // mapping values
	items []*node // sequence items
	at    where
}

// where locates a node: a line and column in YAML, a path in both formats.
type where struct {
	line, col int
	path      string
}

// field returns the value of mapping key name, or nil.
func (n *node) field(name string) *node {
	for i, k := range n.keys {
		if k.text == name {
			return n.vals[i]
		}
	}
	return nil
}

const (
	maxDepth = 64
	maxNodes = 200_000
)

var errTooLarge = errors.New("the document is too deeply nested or too large (aliases expand to more than 200000 values)")

// Paths: YAML paths are dotted ("budgets.t_mutate.quota", "layers.x.use[1]");
// JSON paths are JSONPath ("$.budgets.t_mutate.quota", `$.budgets["a b"]`).

func childPath(parent, key string) string {
	simple := key != ""
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' && i > 0) {
			simple = false
			break
		}
	}
	switch {
	case simple && parent == "":
		return key
	case simple:
		return parent + "." + key
	}
	return parent + "[" + strconv.Quote(key) + "]"
}

func itemPath(parent string, i int) string { return parent + "[" + strconv.Itoa(i) + "]" }

// ---- YAML ----

type yamlReader struct {
	nodes int
	probs []*Problem
	dups  []*Problem // keys defined twice: the first is kept, and decoding goes on
	file  string
}

func parseYAML(file string, data []byte) (*node, []*Problem) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, []*Problem{{File: file, Line: 1, Column: 1, Err: errors.New("the document is empty")}}
		}
		return nil, []*Problem{yamlSyntax(file, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, []*Problem{{File: file, Line: extra.Line, Column: extra.Column, Err: errors.New("more than one YAML document; put everything in one")}}
	} else if !errors.Is(err, io.EOF) {
		return nil, []*Problem{yamlSyntax(file, err)}
	}
	r := &yamlReader{file: file}
	root := r.convert(&doc, "", 0)
	if len(r.probs) > 0 {
		return nil, append(r.probs, r.dups...)
	}
	return root, r.dups
}

// yamlSyntax turns a yaml.v3 error ("yaml: line 3: ...") into a Problem.
// yaml.v3 numbers the lines of its parser errors ("did not find expected
// ...") from 0 and those of its scanner errors from 1; the parser's are
// corrected here.
func yamlSyntax(file string, err error) *Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line = n
				msg = strings.TrimSpace(rest[i+1:])
				if strings.HasPrefix(msg, "did not find expected") {
					line++
				}
			}
		}
	}
	return &Problem{File: file, Line: line, Err: fmt.Errorf("invalid YAML: %s", msg)}
}

func (r *yamlReader) bad(n *yaml.Node, path string, format string, args ...any) {
	r.probs = append(r.probs, &Problem{File: r.file, Line: n.Line, Column: n.Column, Path: path, Err: fmt.Errorf(format, args...)})
}

// convert converts the YAML node n at path, depth levels down, into a
// node, reporting a document too deep or too large once.
func (r *yamlReader) convert(n *yaml.Node, path string, depth int) *node {
	r.nodes++
	if depth > maxDepth || r.nodes > maxNodes {
		if len(r.probs) == 0 || r.probs[len(r.probs)-1].Err != errTooLarge {
			r.probs = append(r.probs, &Problem{File: r.file, Line: n.Line, Column: n.Column, Path: path, Err: errTooLarge})
		}
		return &node{at: where{n.Line, n.Column, path}}
	}
	at := where{n.Line, n.Column, path}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return &node{at: at}
		}
		return r.convert(n.Content[0], path, depth+1)
	case yaml.AliasNode:
		if n.Alias == nil {
			return &node{at: at}
		}
		out := r.convert(n.Alias, path, depth+1)
		out.at = at
		return out
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return &node{kind: kindNull, at: at}
		}
		return &node{kind: kindScalar, text: n.Value, at: at}
	case yaml.SequenceNode:
		out := &node{kind: kindSeq, at: at}
		for i, c := range n.Content {
			out.items = append(out.items, r.convert(c, itemPath(path, i), depth+1))
		}
		return out
	case yaml.MappingNode:
		return r.convertMap(n, at, depth)
	}
	return &node{at: at}
}

// convertMap converts the YAML mapping n, at at, depth levels down. Its
// keys must be plain names, without merge keys; of a key defined twice,
// the first is kept, and the second reported as a duplicate.
func (r *yamlReader) convertMap(n *yaml.Node, at where, depth int) *node {
	path := at.path
	out := &node{kind: kindMap, at: at}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			r.bad(k, path, "mapping keys must be plain names")
			continue
		}
		if k.Tag == "!!merge" || k.Value == "<<" && k.Style == 0 {
			r.bad(k, path, "merge keys (<<) are not supported; repeat the fields or use an alias for a whole value")
			continue
		}
		cp := childPath(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			r.dups = append(r.dups, &Problem{File: r.file, Line: k.Line, Column: k.Column, Path: cp,
				Err: fmt.Errorf("%q is defined twice (first at line %d)", k.Value, first)})
			continue
		}
		seen[k.Value] = k.Line
		out.keys = append(out.keys, &node{kind: kindScalar, text: k.Value, at: where{k.Line, k.Column, cp}})
		out.vals = append(out.vals, r.convert(v, cp, depth+1))
	}
	return out
}

// ---- JSON ----

type jsonReader struct {
	dec   *json.Decoder
	data  []byte
	file  string
	nodes int
	probs []*Problem // keys defined twice: the first is kept, and decoding goes on
}

func parseJSON(file string, data []byte) (*node, []*Problem) {
	r := &jsonReader{dec: json.NewDecoder(bytes.NewReader(data)), data: data, file: file}
	r.dec.UseNumber()
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, []*Problem{{File: file, Path: "$", Err: errors.New("the document is empty")}}
	}
	root, err := r.value("$", 0)
	if err == nil {
		if _, terr := r.dec.Token(); terr != io.EOF {
			err = errors.New("unexpected data after the top-level value")
			if terr != nil && !errors.Is(terr, io.EOF) {
				err = terr
			}
		}
	}
	if err != nil {
		return nil, []*Problem{r.syntax(err)}
	}
	return root, r.probs
}

// syntax locates a decoding error by line and column.
func (r *jsonReader) syntax(err error) *Problem {
	off := r.dec.InputOffset()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = se.Offset
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = errors.New("unexpected end of the document")
		off = int64(len(r.data))
	}
	if err == errTooLarge {
		return &Problem{File: r.file, Path: "$", Err: err}
	}
	line, col := lineCol(r.data, off)
	return &Problem{File: r.file, Line: line, Column: col, Err: fmt.Errorf("invalid JSON: %v", err)}
}

func lineCol(data []byte, off int64) (int, int) {
	off = min(max(off, 0), int64(len(data)))
	line := 1 + bytes.Count(data[:off], []byte{'\n'})
	col := int(off) - bytes.LastIndexByte(data[:off], '\n')
	return line, col
}

// value reads the next JSON value, at path, depth levels down, into a
// node.
func (r *jsonReader) value(path string, depth int) (*node, error) {
	r.nodes++
	if depth > maxDepth || r.nodes > maxNodes {
		return nil, errTooLarge
	}
	tok, err := r.dec.Token()
	if err != nil {
		return nil, err
	}
	at := where{path: path}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return r.object(at, depth)
		case '[':
			return r.array(at, depth)
		}
		return nil, fmt.Errorf("unexpected %q", rune(t))
	case string:
		return &node{kind: kindScalar, text: t, at: at}, nil
	case json.Number:
		return &node{kind: kindScalar, text: string(t), at: at}, nil
	case bool:
		return &node{kind: kindScalar, text: strconv.FormatBool(t), at: at}, nil
	case nil:
		return &node{kind: kindNull, at: at}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// object reads the rest of a JSON object, whose '{' was read, at at,
// depth levels down. Of a key defined twice, the first is kept, and the
// second reported as a duplicate.
func (r *jsonReader) object(at where, depth int) (*node, error) {
	out := &node{kind: kindMap, at: at}
	seen := map[string]bool{}
	for r.dec.More() {
		kt, err := r.dec.Token()
		if err != nil {
			return nil, err
		}
		k, ok := kt.(string)
		if !ok {
			return nil, fmt.Errorf("object key %v is not a string", kt)
		}
		cp := childPath(at.path, k)
		v, err := r.value(cp, depth+1)
		if err != nil {
			return nil, err
		}
		if seen[k] {
			r.probs = append(r.probs, &Problem{File: r.file, Path: cp, Err: fmt.Errorf("%q is defined twice", k)})
			continue
		}
		seen[k] = true
		out.keys = append(out.keys, &node{kind: kindScalar, text: k, at: where{path: cp}})
		out.vals = append(out.vals, v)
	}
	if _, err := r.dec.Token(); err != nil {
		return nil, err
	}
	return out, nil
}

// array reads the rest of a JSON array, whose '[' was read, at at, depth
// levels down.
func (r *jsonReader) array(at where, depth int) (*node, error) {
	out := &node{kind: kindSeq, at: at}
	for i := 0; r.dec.More(); i++ {
		v, err := r.value(itemPath(at.path, i), depth+1)
		if err != nil {
			return nil, err
		}
		out.items = append(out.items, v)
	}
	if _, err := r.dec.Token(); err != nil {
		return nil, err
	}
	return out, nil
}
