package gemini

import (
	"flag"
	"github.com/oncegate/oncegate/internal/docsync"
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
	docsync.Hold(t, "../../../docs/providers.md", "<!-- gemini-fields:begin -->", "<!-- gemini-fields:end -->", columnRows(), *updateDocs, "go test ./internal/provider/gemini -update")
}
