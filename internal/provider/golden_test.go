package provider

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

var update = flag.Bool("update", false, "rewrite golden transcripts")

// translate runs an upstream transcript through the upstream decoder and a
// client encoder, as the gateway's relay does: malformed events skipped,
// visible events relayed, one finish with the upstream's usage.
func translate(t *testing.T, up, client Protocol, transcript []byte) (out []byte, warnings int) {
	t.Helper()
	rd := sse.NewReader(bytes.NewReader(transcript), 1<<20)
	dec := NewDecoder(up)
	enc := NewEncoder(client, ResponseID(client, "01944f3e-8c00-7000-8000-000000000001"), 1767225600, "")
	var evs []Event
	var finish string
	var usage gw.Usage
	started := false
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var derr error
		if evs, derr = dec.Decode(ev, evs[:0]); derr != nil {
			warnings++
			continue
		}
		for _, e := range evs {
			if e.Visible() && !started {
				out, started = enc.Start(out, usage.InputTokens), true
			}
			switch e.Kind {
			case EvStart:
				enc = NewEncoder(client, ResponseID(client, "01944f3e-8c00-7000-8000-000000000001"), 1767225600, e.Model)
			case EvText:
				out = enc.Text(out, e.Text)
			case EvToolStart:
				out = enc.ToolStart(out, e.ToolIndex, e.ToolID, e.ToolName)
			case EvToolArgs:
				out = enc.ToolArgs(out, e.ToolIndex, e.Args)
			case EvFinish:
				finish = e.Finish
			case EvUsage:
				usage = e.Usage
			}
		}
	}
	return enc.Finish(out, finish, usage, true), warnings
}

// TestGoldenTranscripts pins each translation direction's output byte for
// byte. Regenerate with: go test ./internal/provider -update
func TestGoldenTranscripts(t *testing.T) {
	for _, up := range []Protocol{OpenAI, Anthropic} {
		for _, client := range []Protocol{OpenAI, Anthropic} {
			name := string(client) + "_client_from_" + string(up) + "_upstream.sse"
			t.Run(name, func(t *testing.T) {
				in, err := os.ReadFile(filepath.Join("testdata", "upstream_"+string(up)+".sse"))
				if err != nil {
					t.Fatal(err)
				}
				got, warnings := translate(t, up, client, in)
				if warnings != 1 {
					t.Fatalf("%d malformed events skipped, want 1", warnings)
				}
				path := filepath.Join("testdata", name)
				if *update {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run with -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s differs from the golden transcript; got:\n%s", name, got)
				}
			})
		}
	}
}
