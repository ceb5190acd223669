package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/mock"
)

// The official Node openai client works unchanged: a conversation through
// responses.create, responses.stream, retrieve, inputItems.list and
// delete, on a chat route and on a stateful one. It needs tests/node's
// dependencies (npm ci --prefix tests/node, which .ci/run does).
func TestNodeSDK(t *testing.T) {
	skip := t.Skip
	if os.Getenv("ONCEGATE_TEST_NODE") != "" {
		skip = t.Fatal // CI installed it: a missing SDK is a failure there
	}
	if _, err := os.Stat("../node/node_modules/openai"); err != nil {
		skip("the Node SDK is not installed: run npm ci --prefix tests/node")
	}
	if _, err := exec.LookPath("node"); err != nil {
		skip("node is not on PATH")
	}
	for _, model := range []string{"chat", "convo"} {
		t.Run(model, func(t *testing.T) {
			w := newWorld(t, mock.Config{Tokens: 7})
			cfg, err := os.ReadFile(w.config)
			if err != nil {
				t.Fatal(err)
			}
			url := mockURL(t, w)
			extra := strings.ReplaceAll(`
  - {id: rs, type: openai-responses, base_url: "MOCK/v1", timeouts: {connect: 1s, first_byte: 60s, idle: 60s}}`, "MOCK", url)
			s := strings.Replace(string(cfg), "providers: [", "providers:\n  - ", 1)
			s = strings.Replace(s, `timeouts: {connect: 1s, first_byte: 60s, idle: 60s}}]`, `timeouts: {connect: 1s, first_byte: 60s, idle: 60s}}`+extra, 1)
			s = strings.Replace(s, "models:\n", `  - {id: rs, provider: rs, model: rs-model, behavior_class: c, data_boundary: local, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
models:
  - {name: convo, routes: [rs], retry: {max_attempts: 2, base_delay: 10ms, max_delay: 50ms, deadline: 60s}}
`, 1)
			if err := os.WriteFile(w.config, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
			g := w.start()
			cmd := exec.Command("node", "responses.mjs", model)
			cmd.Dir = "../node"
			cmd.Env = append(os.Environ(), "ONCEGATE_URL="+g.url+"/v1", "ONCEGATE_KEY="+apiKey)
			stdout, err := cmd.Output()
			if err != nil {
				var stderr []byte
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = ee.Stderr
				}
				t.Fatalf("node: %v\n%s\n%s", err, stdout, stderr)
			}
			var got struct {
				Texts, IDs, Events, InputItems []string
				Deltas, Retrieved              string
				AfterDelete                    int
				AfterDeleteCode                string
			}
			if err := json.Unmarshal(stdout, &got); err != nil {
				t.Fatalf("node printed %s: %v", stdout, err)
			}
			var texts []string
			for i, u := range []string{"hello from node", "and then?", "tell me more"} {
				texts = append(texts, u)
				want := mock.AnswerTo(0, "", texts, 7)
				if got.Texts[i] != want {
					t.Fatalf("turn %d: node read %q, want %q", i+1, got.Texts[i], want)
				}
				texts = append(texts, want)
			}
			if got.Deltas != got.Texts[2] || got.Events[0] != "response.created" || got.Events[1] != "response.completed" ||
				got.Retrieved != got.Texts[1] || len(got.InputItems) != 1 || got.InputItems[0] != "tell me more" ||
				got.AfterDelete != 404 || got.AfterDeleteCode != "response_not_found" {
				t.Fatalf("node saw %+v", got)
			}
			if n := w.mock.Stats().Requests; n != 3 {
				t.Fatalf("%d upstream calls for 3 turns", n)
			}
		})
	}
}

// The official Node AzureOpenAI client, unchanged, against the gateway's
// root as its Azure endpoint, with the alias as its deployment: chat,
// a stream and embeddings, one upstream call and one receipt each.
func TestNodeAzureOpenAI(t *testing.T) {
	skip := t.Skip
	if os.Getenv("ONCEGATE_TEST_NODE") != "" {
		skip = t.Fatal
	}
	if _, err := os.Stat("../node/node_modules/openai"); err != nil {
		skip("the Node SDK is not installed: run npm ci --prefix tests/node")
	}
	if _, err := exec.LookPath("node"); err != nil {
		skip("node is not on PATH")
	}
	w := newWorld(t, mock.Config{Tokens: 7})
	g := w.start()
	cmd := exec.Command("node", "azure.mjs", "chat")
	cmd.Dir = "../node"
	cmd.Env = append(os.Environ(), "ONCEGATE_ENDPOINT="+g.url, "ONCEGATE_KEY="+apiKey)
	stdout, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("node: %v\n%s\n%s", err, stdout, stderr)
	}
	var got struct {
		Text, Streamed string
		Dimensions     int
		IDs            []string
	}
	if err := json.Unmarshal(stdout, &got); err != nil {
		t.Fatalf("node printed %s: %v", stdout, err)
	}
	if got.Text == "" || got.Streamed == "" || got.Dimensions == 0 || len(got.IDs) != 3 {
		t.Fatalf("node saw %+v", got)
	}
	seen := map[string]bool{}
	for _, id := range got.IDs {
		if id == "" || seen[id] {
			t.Fatalf("request ids %v: want three distinct", got.IDs)
		}
		seen[id] = true
		req, _ := http.NewRequest("GET", g.url+"/receipts/"+id, nil)
		req.Header.Set("api-key", apiKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Terminal, Model string }
		err = json.NewDecoder(res.Body).Decode(&r)
		res.Body.Close()
		if res.StatusCode != 200 || err != nil || r.Terminal != "succeeded" || r.Model != "chat" {
			t.Fatalf("receipt %s: %d %+v %v", id, res.StatusCode, r, err)
		}
	}
	if n := w.mock.Stats().Requests; n != 3 {
		t.Fatalf("%d upstream calls for 3 requests", n)
	}
}
