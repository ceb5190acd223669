package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/mock"
	"go.yaml.in/yaml/v3"
)

// Every YAML block in the README and docs/ is a configuration, or part of
// one, that a reader copies: each passes `oncegate check`. A block that
// is a whole configuration is checked as it is (with a store and a tenant
// added when it has none); a fragment is merged into a preamble — the
// default one (below), or the one its document names on the line before
// the fence, `<!-- check: preamble NAME -->`, read from
// testdata/docs/NAME.yaml. The providers a fragment adds get a route each
// when it gives them none, its routes an alias each when no alias names
// them, so every line of it meets the same validation `serve` applies.
// `<!-- check: skip REASON -->` leaves out a block that is not a
// configuration; a reason is required.

// docsPreamble is what a fragment is completed with.
const docsPreamble = `
store: "memory://"
tenants: [{id: docs, api_key_env: DOCS_TENANT_KEY}]
`

// docBlock is one fenced YAML block of a document.
type docBlock struct {
	file     string
	line     int    // the fence's line
	preamble string // the preamble named before the fence, "" for the default
	skip     string // why it is no configuration
	text     string
}

var checkMarker = regexp.MustCompile(`^<!-- check: (preamble|skip) ?(.*?) -->$`)

// yamlBlocks reads the fenced ```yaml blocks of path.
func yamlBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		blocks []docBlock
		cur    *docBlock
		prev   string
		body   strings.Builder
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```yaml":
			cur = &docBlock{file: path, line: n}
			if m := checkMarker.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
				if m[1] == "skip" {
					cur.skip = m[2]
					if cur.skip == "" {
						t.Errorf("%s:%d: a skipped block needs its reason", path, n)
					}
				} else {
					cur.preamble = m[2]
				}
			}
			body.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.text = body.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line + "\n")
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

// complete merges a block into its preamble: the preamble's lists come
// first, the block's other keys win; providers and routes of the block
// that nothing names get a route or an alias of their own.
func complete(t *testing.T, b docBlock) string {
	t.Helper()
	pre := docsPreamble
	if b.preamble != "" {
		raw, err := os.ReadFile(filepath.Join("testdata", "docs", b.preamble+".yaml"))
		if err != nil {
			t.Fatalf("%s:%d names preamble %q: %v", b.file, b.line, b.preamble, err)
		}
		pre += string(raw)
	}
	var base, frag map[string]any
	if err := yaml.Unmarshal([]byte(pre), &base); err != nil {
		t.Fatalf("preamble %q: %v", b.preamble, err)
	}
	if err := yaml.Unmarshal([]byte(b.text), &frag); err != nil {
		t.Fatalf("%s:%d: not YAML: %v", b.file, b.line, err)
	}
	if _, whole := frag["tenants"]; whole {
		delete(base, "tenants")
	}
	for k, v := range frag {
		if l, ok := v.([]any); ok && (k == "tenants" || k == "providers" || k == "routes" || k == "models") {
			base[k] = append(list(base[k]), l...)
			continue
		}
		base[k] = v
	}
	routed, aliased := map[string]bool{}, map[string]bool{}
	for _, r := range list(base["routes"]) {
		if m, ok := r.(map[string]any); ok {
			routed[fmt.Sprint(m["provider"])] = true
		}
	}
	for _, a := range list(base["models"]) {
		if m, ok := a.(map[string]any); ok {
			for _, id := range flatten(m["routes"]) {
				aliased[id] = true
			}
		}
	}
	for _, p := range list(frag["providers"]) {
		id := fmt.Sprint(p.(map[string]any)["id"])
		if !routed[id] {
			base["routes"] = append(list(base["routes"]), map[string]any{"id": "docs-" + id, "provider": id, "model": "docs-model",
				"behavior_class": "docs", "data_boundary": "external", "max_attempts": 1,
				"price": map[string]any{"input_usd_per_mtok": 1, "output_usd_per_mtok": 1}})
		}
	}
	for _, r := range list(base["routes"]) {
		id := fmt.Sprint(r.(map[string]any)["id"])
		if !aliased[id] {
			base["models"] = append(list(base["models"]), map[string]any{"name": "docs-" + id, "routes": []any{id}})
		}
	}
	out, err := yaml.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func list(v any) []any { l, _ := v.([]any); return l }

// flatten lists the route ids of an alias's routes, tiers included.
func flatten(v any) []string {
	var ids []string
	for _, e := range list(v) {
		if tier, ok := e.([]any); ok {
			ids = append(ids, flatten(tier)...)
			continue
		}
		ids = append(ids, fmt.Sprint(e))
	}
	return ids
}

var envName = regexp.MustCompile(`\b[a-z_]*_env:\s*"?([A-Z][A-Z0-9_]*)`)

func TestEveryConfigInTheDocsPassesCheck(t *testing.T) {
	m := mock.New(mock.Config{})
	defer m.Close()
	sa := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(sa, mock.ServiceAccountJSON("http://127.0.0.1:1"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDDOCS")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "docs-secret")
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, path := range append([]string{"../../README.md"}, docs...) {
		for _, b := range yamlBlocks(t, path) {
			if b.skip != "" {
				continue
			}
			name := fmt.Sprintf("%s:%d", strings.TrimPrefix(b.file, "../../"), b.line)
			t.Run(name, func(t *testing.T) {
				src := complete(t, b)
				for _, v := range envName.FindAllStringSubmatch(src, -1) {
					if strings.HasSuffix(v[0][:strings.Index(v[0], ":")], "credentials_file_env") {
						t.Setenv(v[1], sa)
					} else if _, set := os.LookupEnv(v[1]); !set {
						t.Setenv(v[1], "docs-secret-"+strings.ToLower(v[1]))
					}
				}
				code, out, errOut := runCLI("check", "--config", writeConfig(t, src))
				if code != 0 {
					t.Errorf("%s: oncegate check exit %d\n%s%s\nas checked:\n%s", name, code, errOut, lastLines(out, 5), src)
				}
			})
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d blocks; the documents have more", checked)
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n") + "\n"
}
