package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/identity"
)

func TestDuplicates(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		maps      []string
		want      string // the duplicate's path; "" for none
		bad       bool   // a syntax error
	}{
		{name: "none", doc: `{"tenant":"a","name":"b","budget":{"requests_per_minute":1}}`},
		{name: "a member twice", doc: `{"tenant":"a","name":"n","tenant":"b"}`, want: "tenant"},
		{name: "escaped the second time", doc: `{"tenant":"a","ten\u0061nt":"b"}`, want: "tenant"},
		{name: "in another case", doc: `{"tenant":"a","TENANT":"b"}`, want: "TENANT"},
		{name: "folded beyond ASCII", doc: `{"k":1,"\u212a":2}`, want: "\u212a"}, // KELVIN SIGN folds to k
		{name: "nested", doc: `{"budget":{"requests_per_minute":1,"requests_per_minute":2}}`, want: "budget.requests_per_minute"},
		{name: "the same name in two objects", doc: `{"a":{"x":1},"b":{"x":1},"x":{}}`},
		{name: "in an array's object", doc: `{"items":[{"id":1},{"id":2,"id":3}]}`, want: "items[1].id"},
		{name: "a map's keys in two cases", doc: `{"metadata":{"team":"a","Team":"b"}}`, maps: []string{"metadata"}},
		{name: "a map's key twice", doc: `{"metadata":{"team":"a","team":"b"}}`, maps: []string{"metadata"}, want: "metadata.team"},
		{name: "root array", doc: `[{"a":1},{"a":1,"A":2}]`, want: "[1].A"},
		{name: "a scalar", doc: ` 12 `},
		{name: "empty object", doc: `{}`},
		{name: "trailing data", doc: `{"a":1} {"a":2}`, bad: true},
		{name: "unterminated", doc: `{"a":1`, bad: true},
		{name: "empty", doc: ``, bad: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Duplicates([]byte(c.doc), c.maps...)
			var de *DuplicateError
			switch {
			case c.bad && (err == nil || errors.As(err, &de)):
				t.Fatalf("%v, want a syntax error", err)
			case c.bad:
			case c.want == "" && err != nil:
				t.Fatalf("%v, want none", err)
			case c.want != "" && (!errors.As(err, &de) || de.Path != c.want):
				t.Fatalf("%v, want a duplicate %q", err, c.want)
			}
		})
	}
}

// FuzzDuplicates holds the reader to encoding/json's idea of valid JSON
// and to the canonicalizer's independent look for duplicate keys.
func FuzzDuplicates(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":[1,{"c":2,"C":3}]}}`, `[{"x":1},{"x":1}]`, `{"\u00e9":1,"\u00c9":2}`,
		`"str"`, `{"a":1}x`, `{"metadata":{"k":1,"K":2}}`, `{"a":[[[]]],"b":null,"c":true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		exact := duplicates(doc, func(string) bool { return true })
		folded := Duplicates(doc)
		var de *DuplicateError
		if !json.Valid(doc) {
			if exact == nil || folded == nil {
				t.Fatalf("invalid JSON passed: exact %v, folded %v", exact, folded)
			}
			return
		}
		for _, err := range []error{exact, folded} {
			if err != nil && !errors.As(err, &de) {
				t.Fatalf("valid JSON refused: %v", err)
			}
		}
		if exact != nil && folded == nil {
			t.Fatalf("an exact duplicate (%v) passed when names are folded", exact)
		}
		_, cerr := identity.Canonicalize(doc)
		switch {
		case cerr == nil && exact != nil:
			t.Fatalf("a duplicate %v the canonicalizer did not find", exact)
		case cerr != nil && exact == nil && strings.Contains(cerr.Error(), "duplicate key"):
			t.Fatalf("the canonicalizer found a duplicate (%v), the reader none", cerr)
		}
	})
}
