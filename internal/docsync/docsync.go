// Package docsync holds a generated table in a document to the code that
// generates it: the part of the file between two markers must equal what
// the code renders, and tests run with -update rewrite it.
package docsync

import (
	"os"
	"strings"
	"testing"
)

// Hold fails t unless the text of path between the lines begin and end
// (markers such as "<!-- fields:begin -->") is want; with update it
// rewrites that text instead. fix names the command that updates it.
func Hold(t testing.TB, path, begin, end, want string, update bool, fix string) {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin += "\n"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("%s has no markers %q and %q", path, strings.TrimSpace(begin), end)
	}
	if string(doc[i+len(begin):j]) == want {
		return
	}
	if !update {
		t.Fatalf("%s does not show what the code generates; run %s", path, fix)
	}
	out := string(doc[:i+len(begin)]) + want + string(doc[j:])
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}
