package admin

import (
	"net/http/httptest"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
)

// If-Match compares strong tags of ours only; anything else in the list
// matches no version, and a value that is no tag is a 400 naming it.
func TestIfMatch(t *testing.T) {
	for _, c := range []struct {
		header string
		holds  map[int64]bool
		bad    bool
	}{
		{"", map[int64]bool{1: true, 7: true}, false},
		{`"v3"`, map[int64]bool{3: true, 4: false}, false},
		{`"v3", "v5"`, map[int64]bool{3: true, 4: false, 5: true}, false},
		{`W/"v3"`, map[int64]bool{3: false}, false},
		{`"etag-of-another"`, map[int64]bool{3: false}, false},
		{`*`, map[int64]bool{1: true, 9: true}, false},
		{`v3`, nil, true},
	} {
		r := httptest.NewRequest("PATCH", "/admin/keys/k", nil)
		if c.header != "" {
			r.Header.Set("If-Match", c.header)
		}
		p, e := ifMatch(r)
		if (e != nil) != c.bad {
			t.Fatalf("If-Match %s: error %v, want one: %v", c.header, e, c.bad)
		}
		if c.bad {
			if e.Param != "If-Match" {
				t.Fatalf("If-Match %s: the 400 names %q", c.header, e.Param)
			}
			continue
		}
		for v, want := range c.holds {
			if got := p.holds(v); got != want {
				t.Errorf("If-Match %s, version %d: holds %v, want %v", c.header, v, got, want)
			}
		}
	}
	if got := etagOf(&ledger.Key{Version: 12}); got != `"v12"` {
		t.Fatalf("etagOf: %s", got)
	}
}
