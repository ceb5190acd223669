package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The worked example of docs/migrating-from-litellm.md shows what the
// import writes of its LiteLLM config, byte for byte.
func TestMigratingDocShowsTheImport(t *testing.T) {
	blocks := yamlBlocks(t, "../../docs/migrating-from-litellm.md")
	if len(blocks) != 2 || blocks[0].skip == "" {
		t.Fatalf("want the LiteLLM config (skipped by the docs check) and its import, found %d blocks", len(blocks))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "litellm.yaml"), []byte(blocks[0].text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	code, out, errOut := runCLI("import", "litellm", "litellm.yaml")
	if code != 0 || out != blocks[1].text {
		t.Fatalf("exit %d %s\nthe document shows:\n%s\nthe import writes:\n%s", code, errOut, blocks[1].text, out)
	}
}
