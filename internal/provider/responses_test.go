package provider

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParseResponsesRequest: a Responses request body, an upstream
// response object and a stored item list are untrusted input. Parsing any
// of them never panics; a refused request names the field; an accepted
// one re-encodes its items and reads them back the same.
func FuzzParseResponsesRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hi"}`))
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:x"}]},{"type":"function_call","call_id":"c","name":"n","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"text","text":"o"}]}],"tools":[{"type":"function","name":"n"}],"tool_choice":{"type":"function","name":"n"},"metadata":{"a":"b"},"previous_response_id":"r","conversation":{"id":"c"}}`))
	f.Add([]byte(`{"model":"m","input":[],"text":{"format":{"type":"json_schema"}},"background":true}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, _, _ = DecodeResponsesObject(body)
		_, _, _ = ResponseOutput(body)
		_ = StreamResponseObject(body)
		r, err := ParseResponsesRequest(body)
		if err != nil {
			var inv *InvalidRequestError
			if !errors.As(err, &inv) {
				t.Fatalf("a refusal that names no field: %v", err)
			}
			return
		}
		b, err := json.Marshal(r.Input)
		if err != nil {
			t.Fatal(err)
		}
		var back []Item
		if err := json.Unmarshal(b, &back); err != nil || len(back) != len(r.Input) {
			t.Fatalf("items do not read back: %v (%d of %d)", err, len(back), len(r.Input))
		}
		_, _ = ItemsToMessages(back)
	})
}
