// Package strictjson finds what encoding/json lets through silently in a
// body that must be strict: an object member given twice, of which
// encoding/json keeps the last (docs/keys-and-teams.md). It reads untrusted input
// and is fuzzed.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// DuplicateError is a member an object gives twice.
type DuplicateError struct {
	// Path names the member as an API's param does: its names from the
	// document's root joined by dots, an array element's index in
	// brackets ("budget.requests_per_minute", "items[2].name").
	Path string
}

func (e *DuplicateError) Error() string { return "duplicate member " + strconv.Quote(e.Path) }

// Duplicates returns a *DuplicateError for the first object member that
// repeats an earlier member of its object, nil when none does, or the
// syntax error that stopped the reading (doc must be one JSON value).
// Names are compared as encoding/json matches them to a struct's fields:
// once unescaped and regardless of case ("Tenant" repeats "tenant").
// The objects at the paths maps lists decode into Go maps, whose keys
// are distinct unless equal: their names are compared exactly.
func Duplicates(doc []byte, maps ...string) error {
	return duplicates(doc, func(path string) bool { return slices.Contains(maps, path) })
}

// frame is an object or array being read.
type frame struct {
	object bool
	exact  bool                // object: names compared exactly
	path   string              // its own path
	seen   map[string]struct{} // object: the names read, folded unless exact
	name   string              // object: the member whose value is next
	key    bool                // object: a name (or the end) is next
	index  int                 // array: the next element's index
}

// child is the path of the value that comes next in f (the root's when
// f is nil).
func (f *frame) child() string {
	switch {
	case f == nil:
		return ""
	case !f.object:
		return f.path + "[" + strconv.Itoa(f.index) + "]"
	case f.path == "":
		return f.name
	}
	return f.path + "." + f.name
}

// done records that a value in f ended.
func (f *frame) done() {
	if f == nil {
		return
	}
	if f.object {
		f.key = true
	} else {
		f.index++
	}
}

// duplicates is Duplicates with exact saying which objects compare names
// exactly.
func duplicates(doc []byte, exact func(path string) bool) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var stack []*frame
	top := func() *frame {
		if len(stack) == 0 {
			return nil
		}
		return stack[len(stack)-1]
	}
	read := false // the root value was read whole
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) && read {
			return nil
		}
		if err != nil {
			return err
		}
		if read {
			return errors.New("strictjson: data after the JSON value")
		}
		f := top()
		if f != nil && f.object && f.key {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
				top().done()
				read = len(stack) == 0
				continue
			}
			name, _ := tok.(string) // the decoder reads only strings here
			k := name
			if !f.exact {
				k = fold(name)
			}
			f.name, f.key = name, false
			if _, dup := f.seen[k]; dup {
				return &DuplicateError{Path: f.child()}
			}
			f.seen[k] = struct{}{}
			continue
		}
		switch tok {
		case json.Delim('{'):
			p := f.child()
			stack = append(stack, &frame{object: true, exact: exact(p), path: p, seen: map[string]struct{}{}, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{path: f.child()})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			top().done()
			read = len(stack) == 0
		default:
			f.done()
			read = len(stack) == 0
		}
	}
}

// fold maps every string bytes.EqualFold holds equal to s — as
// encoding/json matches a name to a struct field — to one string: each
// rune becomes the least of its case-folding orbit.
func fold(s string) string {
	var b strings.Builder
	for _, r := range s {
		least := r
		for o := unicode.SimpleFold(r); o != r; o = unicode.SimpleFold(o) {
			least = min(least, o)
		}
		b.WriteRune(least)
	}
	return b.String()
}
