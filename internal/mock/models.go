package mock

import (
	"net/http"
	"strings"
)

// The model lookups, which `oncegate check --connect` asks to find out
// whether a route's model exists: OpenAI's and Anthropic's
// GET /v1/models/{model} (told apart by Anthropic's anthropic-version
// header), the Gemini API's GET /v1beta/models/{model} and Vertex AI's
// GET /v1/publishers/{publisher}/models/{model}. Every model exists but
// those a model_not_found rule names (a rule without a model names them
// all); a missing one is answered in the provider's own shape. Lookups
// are not generations: they are counted apart (ModelLookups).

// modelLookup counts one model lookup: every one the provider saw, refused
// credentials included.
func (m *Mock) modelLookup() {
	m.mu.Lock()
	m.modelLookups++
	m.mu.Unlock()
}

// missing reports whether the script makes any of names (one model's
// spellings) a model the provider does not have.
func (m *Mock) missing(names ...string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.script.Rules {
		if r.Fault.Type != FaultModelNotFound || r.CountTokens {
			continue
		}
		for _, n := range names {
			if r.Model == "" || r.Model == n {
				return true
			}
		}
	}
	return false
}

// ModelLookups counts the model lookups received so far.
func (m *Mock) ModelLookups() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.modelLookups
}

// getModel answers GET /v1/models/{model}: OpenAI's model object, or
// Anthropic's when the request carries anthropic-version.
func (m *Mock) getModel(w http.ResponseWriter, r *http.Request) {
	m.modelLookup()
	model := r.PathValue("model")
	anthropic, missing := r.Header.Get("anthropic-version") != "", m.missing(model)
	switch {
	case missing && anthropic:
		anError(w, 404, "not_found_error", "model: "+model)
	case missing:
		oaError(w, 404, "invalid_request_error", "model_not_found", oaModelNotFound(model))
	case anthropic:
		writeJSON(w, 200, map[string]any{"type": "model", "id": model, "display_name": model, "created_at": "2025-05-22T00:00:00Z"})
	default:
		writeJSON(w, 200, map[string]any{"id": model, "object": "model", "created": 1715367049, "owned_by": "system"})
	}
}

// getGeminiModel answers the Gemini API's GET /v1beta/models/{model}.
func (m *Mock) getGeminiModel(w http.ResponseWriter, r *http.Request) {
	m.modelLookup()
	k := r.Header.Get("x-goog-api-key")
	if k == "" {
		k = r.URL.Query().Get("key")
	}
	if k != m.geminiKey() {
		googleError(w, 400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
			[]any{errorInfo("API_KEY_INVALID", "generativelanguage.googleapis.com")})
		return
	}
	model := r.PathValue("model")
	if m.missing(model) {
		googleError(w, 404, "NOT_FOUND", "models/"+model+" is not found for API version "+geminiVersion(r)+".", nil)
		return
	}
	writeJSON(w, 200, map[string]any{"name": "models/" + model, "version": "001", "displayName": model,
		"inputTokenLimit": 1048576, "outputTokenLimit": 65536, "supportedGenerationMethods": []string{"generateContent", "countTokens"}})
}

// getPublisherModel answers Vertex AI's
// GET /v1/publishers/{publisher}/models/{model}, with a token the mock's
// token endpoint issued.
func (m *Mock) getPublisherModel(w http.ResponseWriter, r *http.Request) {
	m.modelLookup()
	x := &exchange{m: m, w: w, r: r}
	if !m.vertex.check(x) {
		return
	}
	pub, model := r.PathValue("publisher"), r.PathValue("model")
	if m.missing(model, strings.SplitN(model, "@", 2)[0]) {
		googleError(w, 404, "NOT_FOUND", "Publisher Model `publishers/"+pub+"/models/"+model+"` is not found.", nil)
		return
	}
	writeJSON(w, 200, map[string]any{"name": "publishers/" + pub + "/models/" + model, "versionId": "001",
		"openSourceCategory": "PROPRIETARY", "launchStage": "GA"})
}
