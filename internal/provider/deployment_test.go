package provider

import (
	"encoding/json"
	"testing"
)

// A deployment's name becomes the body's model, replacing one or adding
// one; a model that is not a string given once is refused by name.
func TestWithDeploymentSetsTheModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, want string }{
		{`{"model":"gpt-4o","messages":[]}`, `{"model":"chat","messages":[]}`},
		{`{"messages":[]}`, `{"model":"chat","messages":[]}`},
		{` { "messages" : [] } `, `{"model":"chat", "messages" : [] } `},
		{`{}`, `{"model":"chat"}`},
		{`{ }`, `{"model":"chat" }`},
		{`[1]`, `[1]`},                                   // not an object: the parser's to refuse
		{`{"m":`, `{"m":`},                               // not JSON: the parser's to refuse
		{"{\"model\":\"\x18\"}", "{\"model\":\"\x18\"}"}, // a raw control byte in the model is no JSON either
	} {
		out, err := WithDeployment([]byte(tc.body), "chat")
		if err != nil || string(out) != tc.want {
			t.Errorf("%s: got %s, %v; want %s", tc.body, out, err, tc.want)
		}
	}
	for _, body := range []string{`{"model":5}`, `{"model":"a","model":"b"}`, `{"model":null,"messages":[]}`} {
		_, err := WithDeployment([]byte(body), "chat")
		var ir *InvalidRequestError
		if !asInvalid(err, &ir) || ir.Param != "model" {
			t.Errorf("%s: got %v, want an invalid request naming model", body, err)
		}
	}
}

func asInvalid(err error, ir **InvalidRequestError) bool {
	e, ok := err.(*InvalidRequestError)
	*ir = e
	return ok
}

// FuzzWithDeployment: whatever the body, a result without error that is
// a JSON object has exactly the deployment as its model and otherwise
// the body's members.
func FuzzWithDeployment(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"x"}]}`), "chat")
	f.Add([]byte(`{"model":"gpt-4o","input":"x"}`), "embed")
	f.Add([]byte(`{"model":1}`), "m")
	f.Add([]byte(` {} `), "m")
	f.Add([]byte(`{"\u006dodel":"x"}`), "m")
	f.Fuzz(func(t *testing.T, body []byte, model string) {
		out, err := WithDeployment(body, model)
		if err != nil {
			return
		}
		var got map[string]any
		if json.Unmarshal(out, &got) != nil {
			var in map[string]any
			if json.Unmarshal(body, &in) == nil {
				t.Fatalf("a JSON object became invalid: %q → %q", body, out)
			}
			return
		}
		var in map[string]any
		if json.Unmarshal(body, &in) != nil {
			t.Fatalf("a body that was no JSON object became one: %q → %q", body, out)
		}
		wantModel, _ := json.Marshal(model)
		var m string
		_ = json.Unmarshal(wantModel, &m) // model as JSON spells it (invalid UTF-8 replaced)
		if got["model"] != m {
			t.Fatalf("%q: model %v, want %q", body, got["model"], m)
		}
		for k := range in {
			if _, ok := got[k]; !ok {
				t.Fatalf("%q lost member %q: %q", body, k, out)
			}
		}
	})
}
