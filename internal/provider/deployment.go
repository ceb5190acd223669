package provider

import (
	"bytes"
	"encoding/json"
	"slices"
)

// WithDeployment returns body with its top-level "model" set to model:
// replaced when the body names one, added when it names none. An Azure
// OpenAI client names the model in its path, the deployment, and may
// send a body without a model or with another one; the deployment
// decides (docs/api.md, "Paths"). A body that is not JSON is returned as
// it is, for the parser to say what is wrong with it; a JSON body whose
// model is not a string given once is an invalid request naming model.
func WithDeployment(body []byte, model string) ([]byte, error) {
	if !json.Valid(body) {
		return body, nil // not JSON: the parser refuses it as the client sent it
	}
	if out, ok := replaceModel(body, model); ok {
		return out, nil
	}
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return body, nil // not an object: the parser says so
	}
	if namesModel(body) {
		// replaceModel found no single plain string model, yet one is there.
		return nil, invalid("model", "model must be a string, given once (the deployment in the path names the model: %q)", model)
	}
	member := appendJSONString([]byte(`{"model":`), model)
	rest := body[i+1:]
	if j := skipSpace(rest, 0); j < len(rest) && rest[j] != '}' {
		member = append(member, ',')
	}
	return append(slices.Clip(member), rest...), nil
}

// namesModel reports whether a valid JSON object has a top-level member
// that decodes to "model", however spelled and of whatever type.
func namesModel(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // {
		return false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return false
		}
		if k == "model" {
			return true
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}
