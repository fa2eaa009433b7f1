package main

import (
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// sliceAnswer is what draproxy reads of a ResourceSlice in the API
// server's answer to a get it checks: its identity, spec.driver and what
// binds it to nodes. The values are subslices of the answer (or, for
// strings with escapes, unescaped copies); a set flag says the field was
// there and not null.
type sliceAnswer struct {
	apiVersion, kind, name, namespace, uid []byte
	driver, nodeName                       []byte
	driverSet, nodeNameSet                 bool
	allNodes, allNodesSet                  bool
	perDevice, perDeviceSet                bool
	nodeSelector                           bool // an object, not absent or null
}

// check returns an error unless a is the slice ref names, with a UID and
// a driver: a Status, {} or another object is not.
func (a *sliceAnswer) check(ref objectRef) error {
	apiVersion := len(a.apiVersion) == len(ref.group)+1+len(ref.version) &&
		string(a.apiVersion[:len(ref.group)]) == ref.group && a.apiVersion[len(ref.group)] == '/' &&
		string(a.apiVersion[len(ref.group)+1:]) == ref.version
	switch {
	case string(a.kind) != ref.kind || !apiVersion:
		return fmt.Errorf("the answer is a %q of %q, not a %s of %s", a.kind, a.apiVersion, ref.kind, ref.apiVersion())
	case string(a.name) != ref.name || string(a.namespace) != ref.namespace:
		return fmt.Errorf("the answer is %q in namespace %q, not the object asked for", a.name, a.namespace)
	case len(a.uid) == 0:
		return errors.New("the answer has no metadata.uid")
	case !a.driverSet || len(a.driver) == 0:
		return errors.New("the answer has no spec.driver")
	}
	return nil
}

// boundTo reports whether the slice is bound to node alone, as
// sliceSpec.boundTo decides it.
func (a *sliceAnswer) boundTo(node string) bool {
	return a.nodeNameSet && string(a.nodeName) == node &&
		!(a.allNodesSet && a.allNodes) && !a.nodeSelector && !(a.perDeviceSet && a.perDevice)
}

// readSliceAnswer reads the ResourceSlice in the API server's answer to a
// get that draproxy checks before the driver sees it, as decodeSlice
// reads it, validating the whole document as JSON, and checks that it is
// the slice ref names.
//
// It is written by hand because BenchmarkDRAProxy showed it must be: the
// generic decoder (sigs.k8s.io/json, strict, decodeSlice) cost about 4 µs
// and 17 allocations per get on a 2-core AMD EPYC, a third of what
// draproxy adds to a warm get; this costs a fraction of that and
// allocates nothing for the usual answer. FuzzReadSliceAnswer holds it to
// sigs.k8s.io/json, the decoder the API server and client-go read these
// objects with: whenever it accepts a document that client-go decodes,
// both read the same fields, and whenever decodeSlice accepts one, so
// does it, reading the same.
//
// Like decodeSlice, it refuses a document that is not one JSON object, a
// field it reads said twice or of the wrong type, and (more strictly
// than encoding/json) nesting deeper than maxAnswerDepth; field names are
// case-sensitive.
func readSliceAnswer(data []byte, ref objectRef, a *sliceAnswer) error {
	*a = sliceAnswer{}
	r := jsonReader{data: data}
	if err := r.sliceDocument(a); err != nil {
		return err
	}
	if r.ws(); r.pos != len(r.data) {
		return errors.New("the answer has data after its object")
	}
	return a.check(ref)
}

func (r *jsonReader) sliceDocument(a *sliceAnswer) error {
	return r.fields("the answer", func(key []byte) (int, error) {
		switch string(key) {
		case "apiVersion":
			return 0, r.str(&a.apiVersion, "apiVersion")
		case "kind":
			return 1, r.str(&a.kind, "kind")
		case "metadata":
			return 2, r.metadata(a)
		case "spec":
			return 3, r.spec(a)
		}
		return -1, r.skip(1)
	})
}

func (r *jsonReader) metadata(a *sliceAnswer) error {
	return r.fields("metadata", func(key []byte) (int, error) {
		switch string(key) {
		case "name":
			return 0, r.str(&a.name, "metadata.name")
		case "namespace":
			return 1, r.str(&a.namespace, "metadata.namespace")
		case "uid":
			return 2, r.str(&a.uid, "metadata.uid")
		}
		return -1, r.skip(2)
	})
}

func (r *jsonReader) spec(a *sliceAnswer) error {
	if r.null() { // as an absent spec: no driver, refused by check
		return nil
	}
	return r.fields("spec", func(key []byte) (int, error) {
		switch string(key) {
		case "driver":
			return 0, r.optStr(&a.driver, &a.driverSet, "spec.driver")
		case "nodeName":
			return 1, r.optStr(&a.nodeName, &a.nodeNameSet, "spec.nodeName")
		case "allNodes":
			return 2, r.optBool(&a.allNodes, &a.allNodesSet, "spec.allNodes")
		case "perDeviceNodeSelection":
			return 3, r.optBool(&a.perDevice, &a.perDeviceSet, "spec.perDeviceNodeSelection")
		case "nodeSelector":
			return 4, r.nodeSelector(a)
		}
		return -1, r.skip(2)
	})
}

// fields reads an object (what, in messages) member by member: read gets
// each name with the reader at its value, which it must consume, and
// returns the index of the field it read (0 to 7), or -1 for one it
// skipped. A field read twice is refused, as decodeJSON refuses it.
func (r *jsonReader) fields(what string, read func(key []byte) (int, error)) error {
	if r.peek() != '{' {
		return fmt.Errorf("%s is not an object", what)
	}
	r.pos++
	var seen uint8
	for first := true; ; {
		key, more, err := r.next(&first)
		if err != nil || !more {
			return err
		}
		i, err := read(key)
		switch {
		case err != nil:
			return err
		case i < 0:
		case seen&(1<<i) != 0:
			return fmt.Errorf("duplicate field %q in %s", key, what)
		default:
			seen |= 1 << i
		}
	}
}

func (r *jsonReader) nodeSelector(a *sliceAnswer) error {
	if r.null() {
		a.nodeSelector = false
		return nil
	}
	if r.peek() != '{' {
		return errors.New("spec.nodeSelector is not an object")
	}
	a.nodeSelector = true
	return r.skip(2)
}

// maxAnswerDepth bounds the nesting of an answer: far below encoding/json's
// 10000 (a ResourceSlice nests a dozen levels), so that this reader never
// accepts what that decoder refuses.
const maxAnswerDepth = 1000

// jsonReader reads one JSON document from data, validating what it skips.
type jsonReader struct {
	data []byte
	pos  int
}

var errJSONSyntax = errors.New("the answer is not valid JSON")

func (r *jsonReader) ws() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (r *jsonReader) peek() byte {
	r.ws()
	if r.pos < len(r.data) {
		return r.data[r.pos]
	}
	return 0
}

// literal consumes lit if it comes next.
func (r *jsonReader) literal(lit string) bool {
	if len(r.data)-r.pos >= len(lit) && string(r.data[r.pos:r.pos+len(lit)]) == lit {
		r.pos += len(lit)
		return true
	}
	return false
}

// null consumes a null if it comes next.
func (r *jsonReader) null() bool { return r.peek() == 'n' && r.literal("null") }

// next reads the name of the next member of an object entered, and its
// ':': the reader is then at its value, which the caller must consume.
// more is false at the object's end, which next consumes. first is true
// before the first member (which no ',' precedes); next clears it.
func (r *jsonReader) next(first *bool) (key []byte, more bool, err error) {
	c := r.peek()
	if c == '}' {
		r.pos++
		return nil, false, nil
	}
	if !*first {
		if c != ',' {
			return nil, false, errJSONSyntax
		}
		r.pos++
	}
	*first = false
	if r.peek() != '"' {
		return nil, false, errJSONSyntax
	}
	if key, err = r.stringBytes(); err != nil {
		return nil, false, err
	}
	if r.peek() != ':' {
		return nil, false, errJSONSyntax
	}
	r.pos++
	return key, true, nil
}

// str reads a string (null leaves dst as it is, as encoding/json does).
func (r *jsonReader) str(dst *[]byte, what string) error {
	if r.null() {
		return nil
	}
	if r.peek() != '"' {
		return fmt.Errorf("%s is not a string", what)
	}
	b, err := r.stringBytes()
	if err != nil {
		return err
	}
	*dst = b
	return nil
}

// optStr reads a string, or null (unset).
func (r *jsonReader) optStr(dst *[]byte, set *bool, what string) error {
	if r.null() {
		*dst, *set = nil, false
		return nil
	}
	*set = true
	return r.str(dst, what)
}

// optBool reads true, false, or null (unset).
func (r *jsonReader) optBool(dst, set *bool, what string) error {
	switch {
	case r.null():
		*dst, *set = false, false
	case r.literal("true"):
		*dst, *set = true, true
	case r.literal("false"):
		*dst, *set = false, true
	default:
		return fmt.Errorf("%s is not a boolean", what)
	}
	return nil
}

// stringBytes reads a string at r.pos (a '"') and returns its value, a
// subslice of data when it has no escapes. Invalid UTF-8 is replaced by
// U+FFFD, as encoding/json does.
func (r *jsonReader) stringBytes() ([]byte, error) {
	r.pos++ // '"'
	start := r.pos
	for r.pos < len(r.data) {
		c := r.data[r.pos]
		switch {
		case c == '"':
			s := r.data[start:r.pos:r.pos]
			r.pos++
			return s, nil
		case c == '\\' || c >= utf8.RuneSelf:
			return r.slowString(start)
		case c < 0x20:
			return nil, errJSONSyntax
		}
		r.pos++
	}
	return nil, errJSONSyntax
}

// slowString reads a string with escapes or non-ASCII bytes, from its
// start, as encoding/json's unquote does.
func (r *jsonReader) slowString(start int) ([]byte, error) {
	r.pos = start
	out := []byte{}
	for r.pos < len(r.data) {
		c := r.data[r.pos]
		switch {
		case c == '"':
			r.pos++
			return out, nil
		case c < 0x20:
			return nil, errJSONSyntax
		case c == '\\':
			if r.pos+1 >= len(r.data) {
				return nil, errJSONSyntax
			}
			e := r.data[r.pos+1]
			r.pos += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				c1, ok := r.hex4()
				if !ok {
					return nil, errJSONSyntax
				}
				if utf16.IsSurrogate(c1) {
					// A pair if the low half follows as a \u escape; else
					// U+FFFD, and what follows is read on its own.
					save := r.pos
					if r.literal(`\u`) {
						c2, ok := r.hex4()
						if !ok {
							return nil, errJSONSyntax
						}
						if dec := utf16.DecodeRune(c1, c2); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							continue
						}
					}
					r.pos = save
					c1 = utf8.RuneError
				}
				out = utf8.AppendRune(out, c1)
			default:
				return nil, errJSONSyntax
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			r.pos++
		default:
			rr, size := utf8.DecodeRune(r.data[r.pos:])
			r.pos += size
			out = utf8.AppendRune(out, rr) // RuneError for an invalid byte
		}
	}
	return nil, errJSONSyntax
}

// hex4 reads the four hex digits of a \u escape.
func (r *jsonReader) hex4() (rune, bool) {
	if len(r.data)-r.pos < 4 {
		return 0, false
	}
	var v rune
	for _, c := range r.data[r.pos : r.pos+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | rune(c)
	}
	r.pos += 4
	return v, true
}

// skip reads and validates any value, at nesting depth.
func (r *jsonReader) skip(depth int) error {
	if depth >= maxAnswerDepth {
		return errors.New("the answer nests too deep")
	}
	switch c := r.peek(); {
	case c == '{':
		r.pos++
		for first := true; ; {
			_, more, err := r.next(&first)
			if err != nil || !more {
				return err
			}
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
	case c == '[':
		r.pos++
		if r.peek() == ']' {
			r.pos++
			return nil
		}
		for {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
			switch r.peek() {
			case ',':
				r.pos++
			case ']':
				r.pos++
				return nil
			default:
				return errJSONSyntax
			}
		}
	case c == '"':
		_, err := r.stringBytes()
		return err
	case c == 't' && r.literal("true"), c == 'f' && r.literal("false"), c == 'n' && r.literal("null"):
		return nil
	case c == '-' || ('0' <= c && c <= '9'):
		return r.number()
	}
	return errJSONSyntax
}

// number reads a number as RFC 8259 spells it.
func (r *jsonReader) number() error {
	digits := func() int {
		n := 0
		for r.pos < len(r.data) && '0' <= r.data[r.pos] && r.data[r.pos] <= '9' {
			r.pos++
			n++
		}
		return n
	}
	if r.data[r.pos] == '-' {
		r.pos++
	}
	switch {
	case r.pos < len(r.data) && r.data[r.pos] == '0':
		r.pos++
	case digits() == 0:
		return errJSONSyntax
	}
	if r.pos < len(r.data) && r.data[r.pos] == '.' {
		r.pos++
		if digits() == 0 {
			return errJSONSyntax
		}
	}
	if r.pos < len(r.data) && (r.data[r.pos] == 'e' || r.data[r.pos] == 'E') {
		r.pos++
		if r.pos < len(r.data) && (r.data[r.pos] == '+' || r.data[r.pos] == '-') {
			r.pos++
		}
		if digits() == 0 {
			return errJSONSyntax
		}
	}
	return nil
}
