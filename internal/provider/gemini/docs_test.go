package gemini

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite the gemini column in docs/providers.md")

// columnRows renders the gemini column as docs/providers.md shows it.
func columnRows() string {
	var b strings.Builder
	b.WriteString("| client | field | fate on gemini | to | note |\n|---|---|---|---|---|\n")
	for _, f := range Fields {
		to := "—"
		if f.To != "" {
			to = "`" + f.To + "`"
		}
		fate := string(f.Fate)
		if f.Droppable {
			fate += ", droppable"
		}
		b.WriteString("| " + string(f.Protocol) + " | `" + f.Name + "` | " + fate + " | " + to + " | " + strings.ReplaceAll(f.Note, "|", "\\|") + " |\n")
	}
	return b.String()
}

// TestTheDocsShowTheGeminiColumn holds docs/providers.md to gemini.Fields;
// go test ./internal/provider/gemini -update rewrites it.
func TestTheDocsShowTheGeminiColumn(t *testing.T) {
	const path = "../../../docs/providers.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- gemini-fields:begin -->\n", "<!-- gemini-fields:end -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("%s has no gemini field table markers", path)
	}
	got, want := string(doc[i+len(begin):j]), columnRows()
	if got == want {
		return
	}
	if !*updateDocs {
		t.Fatalf("%s does not show the code's gemini column; run go test ./internal/provider/gemini -update", path)
	}
	if err := os.WriteFile(path, []byte(string(doc[:i+len(begin)])+want+string(doc[j:])), 0o644); err != nil {
		t.Fatal(err)
	}
}
