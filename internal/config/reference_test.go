package config

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md's reference from config.go")

// referenceRows walks the configuration's struct tree in config.go and
// writes one table row per key: its path, its default and the doc comment
// that explains it. The struct tree is the reference; this keeps the
// document its copy.
func referenceRows(t *testing.T) string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]*ast.StructType{}
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok {
			if st, ok := ts.Type.(*ast.StructType); ok {
				types[ts.Name.Name] = st
			}
		}
		return true
	})
	var b strings.Builder
	var walk func(prefix, typ string)
	walk = func(prefix, typ string) {
		st := types[typ]
		for _, field := range st.Fields.List {
			if field.Tag == nil || len(field.Names) == 0 {
				continue
			}
			tag := reflect.StructTag(strings.Trim(field.Tag.Value, "`"))
			name := tag.Get("yaml")
			if name == "" || name == "-" {
				continue
			}
			key := prefix + name
			inner, list := elemType(field.Type)
			if list {
				key += "[]"
			}
			if _, nested := types[inner]; nested && inner != "Duration" {
				b.WriteString("| `" + key + "` | | " + docText(field.Doc) + " |\n")
				walk(key+".", inner)
				continue
			}
			def := tag.Get("default")
			if tag.Get("required") == "true" {
				def = "required"
			}
			if def != "" && def != "required" {
				def = "`" + def + "`"
			}
			b.WriteString("| `" + key + "` | " + def + " | " + docText(field.Doc) + " |\n")
		}
	}
	walk("", "Config")
	return b.String()
}

// elemType names a field's type, and whether it is a list of it.
func elemType(e ast.Expr) (string, bool) {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name, false
	case *ast.ArrayType:
		name, _ := elemType(x.Elt)
		return name, true
	}
	return "", false
}

// docText is a doc comment on one line, its "Default …" sentence left to
// the default column, and table pipes escaped.
func docText(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	s := strings.Join(strings.Fields(g.Text()), " ")
	if i := strings.Index(s, " Default "); i >= 0 && !strings.Contains(s[i:], "(") {
		s = s[:i]
	}
	s = strings.ReplaceAll(s, "|", "\\|")
	return s
}

// TestTheDocsShowTheConfigurationReference holds docs/configuration.md to
// the struct tree; go test ./internal/config -update rewrites it.
func TestTheDocsShowTheConfigurationReference(t *testing.T) {
	const path = "../../docs/configuration.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- reference:begin -->\n", "<!-- reference:end -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("%s has no reference markers", path)
	}
	want := "| key | default | what |\n|---|---|---|\n" + referenceRows(t)
	if got := string(doc[i+len(begin) : j]); got == want {
		return
	}
	if !*update {
		t.Fatalf("%s does not show config.go's reference; run go test ./internal/config -update", path)
	}
	out := string(doc[:i+len(begin)]) + want + string(doc[j:])
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}
