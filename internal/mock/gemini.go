package mock

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The Gemini fakes (ai.google.dev/api/generate-content): the Gemini API's
// generateContent and streamGenerateContent?alt=sse with the
// x-goog-api-key header, and the same format on Vertex AI's
// publishers/google models (vertex.go). Errors are google.rpc.Status
// bodies: {"error": {"code", "message", "status", "details"}}.

// DefaultGeminiAPIKey is the key the Gemini API fake accepts unless
// Config.GeminiAPIKey says otherwise.
const DefaultGeminiAPIKey = "gemini-mock-key"

// gmRequest is the part of a GenerateContentRequest the mock reads.
type gmRequest struct {
	Contents []struct {
		Role  string   `json:"role"`
		Parts []gmPart `json:"parts"`
	} `json:"contents"`
	SystemInstruction *struct {
		Parts []gmPart `json:"parts"`
	} `json:"systemInstruction"`
	Tools []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	ToolConfig *struct {
		FunctionCallingConfig *struct {
			Mode                 string   `json:"mode"`
			AllowedFunctionNames []string `json:"allowedFunctionNames"`
		} `json:"functionCallingConfig"`
	} `json:"toolConfig"`
	GenerationConfig *struct {
		MaxOutputTokens int64 `json:"maxOutputTokens"`
		// CandidateCount is how many candidates to generate (1 to 8;
		// absent: 1).
		CandidateCount *int `json:"candidateCount"`
	} `json:"generationConfig"`
}

type gmPart struct {
	Text         string `json:"text"`
	FunctionCall *struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall"`
	FunctionResponse json.RawMessage `json:"functionResponse"`
}

// decodeGemini reads a GenerateContentRequest; an error is the message of
// a 400 INVALID_ARGUMENT.
func decodeGemini(body []byte, model string, stream bool) (*ask, error) {
	var in gmRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, refusal("Invalid JSON payload received. " + err.Error())
	}
	if len(in.Contents) == 0 {
		return nil, refusal("* GenerateContentRequest.contents: contents is not specified")
	}
	a := &ask{model: model, stream: stream}
	n := int64(0)
	if si := in.SystemInstruction; si != nil {
		var parts []string
		for _, p := range si.Parts {
			parts = append(parts, p.Text)
			n += textTokens(p.Text)
		}
		a.system = strings.Join(parts, "\n\n")
	}
	for _, c := range in.Contents {
		t := turn{role: roleUser}
		if c.Role == "model" {
			t.role = roleAssistant
		}
		for _, p := range c.Parts {
			t.text += p.Text
			if p.FunctionCall != nil {
				t.hasCalls = true
				t.calls += p.FunctionCall.Name + string(p.FunctionCall.Args)
			}
			if len(p.FunctionResponse) > 0 {
				t.role = roleTool
				t.text += string(p.FunctionResponse)
			}
		}
		n += textTokens(t.text+t.calls) + 1
		a.turns = append(a.turns, t)
	}
	a.promptTokens = max(n, 1)
	for _, tl := range in.Tools {
		for _, f := range tl.FunctionDeclarations {
			a.tools = append(a.tools, f.Name)
		}
	}
	if tc := in.ToolConfig; tc != nil && tc.FunctionCallingConfig != nil {
		switch fc := tc.FunctionCallingConfig; fc.Mode {
		case "NONE":
			a.toolMode = "none"
		case "ANY":
			a.toolMode = "required"
			if len(fc.AllowedFunctionNames) > 0 {
				a.toolMode, a.toolName = "tool", fc.AllowedFunctionNames[0]
			}
		}
	}
	if gc := in.GenerationConfig; gc != nil {
		a.maxTokens = gc.MaxOutputTokens
		if n := gc.CandidateCount; n != nil {
			if *n < 1 || *n > 8 {
				return nil, refusal(fmt.Sprintf("Invalid value at 'generation_config.candidate_count' (%d): only values from 1 to 8 are supported", *n))
			}
			a.choices = *n
		}
	}
	return a, nil
}

// splitMethod splits "gemini-2.0-flash:generateContent" into the model and
// the method.
func splitMethod(s string) (model, method string) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i+1:]
}

// serveGemini answers the Gemini API: POST /v1beta/models/{model}:generateContent.
func (m *Mock) serveGemini(w http.ResponseWriter, r *http.Request) {
	model, method := splitMethod(r.PathValue("call"))
	m.serveGeminiFormat(w, r, model, method, geminiCodec{key: m.geminiKey()})
}

func (m *Mock) serveGeminiFormat(w http.ResponseWriter, r *http.Request, model, method string, c codec) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	var stream bool
	switch method {
	case "generateContent":
	case "streamGenerateContent":
		stream = true
	default:
		googleError(w, 404, "NOT_FOUND", "Method not found.", nil)
		return
	}
	a, err := decodeGemini(body, model, stream)
	if err != nil {
		googleError(w, 400, "INVALID_ARGUMENT", err.Error(), nil)
		return
	}
	x := m.begin(c, w, r, a)
	x.finishServe()
}

func (m *Mock) geminiKey() string {
	if m.cfg.GeminiAPIKey != "" {
		return m.cfg.GeminiAPIKey
	}
	return DefaultGeminiAPIKey
}

// googleError writes a google.rpc.Status error body.
func googleError(w http.ResponseWriter, code int, status, msg string, details []any) {
	e := map[string]any{"code": code, "message": msg, "status": status}
	if len(details) > 0 {
		e["details"] = details
	}
	writeJSON(w, code, map[string]any{"error": e})
}

// errorInfo is a google.rpc.ErrorInfo detail.
func errorInfo(reason, service string) map[string]any {
	return map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "googleapis.com",
		"metadata": map[string]any{"service": service}}
}

// geminiCodec answers as the Gemini API (vertex false) or as Vertex AI's
// Gemini models.
type geminiCodec struct {
	key    string
	vertex *vertexAuth
}

func (g geminiCodec) authenticate(x *exchange, _ []byte) bool {
	if g.vertex != nil {
		return g.vertex.check(x)
	}
	k := x.r.Header.Get("x-goog-api-key")
	if k == "" {
		k = x.r.URL.Query().Get("key")
	}
	if k == g.key {
		return true
	}
	if k == "" {
		googleError(x.w, 403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
			[]any{errorInfo("SERVICE_DISABLED", "generativelanguage.googleapis.com")})
		return false
	}
	googleError(x.w, 400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", []any{
		errorInfo("API_KEY_INVALID", "generativelanguage.googleapis.com"),
		map[string]any{"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US", "message": "API key not valid. Please pass a valid API key."}})
	return false
}

func (g geminiCodec) toolPrefix() string { return "call_mock" }

func (g geminiCodec) service() string {
	if g.vertex != nil {
		return "aiplatform.googleapis.com"
	}
	return "generativelanguage.googleapis.com"
}

// fail writes Google's error. Google sends no Retry-After header: a 429's
// wait is the retryDelay of its RetryInfo detail.
func (g geminiCodec) fail(x *exchange, f *Fault) {
	if f.Type == FaultAuth {
		if g.vertex != nil {
			vertexUnauthenticated(x.w)
			return
		}
		googleError(x.w, 400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
			[]any{errorInfo("API_KEY_INVALID", g.service())})
		return
	}
	if f.Type == FaultContentPolicy {
		g.blocked(x, f)
		return
	}
	if f.Type == FaultModelNotFound {
		googleError(x.w, 404, "NOT_FOUND", orDefault(f.Message, g.modelNotFound(x)), nil)
		return
	}
	code, status, msg := googleStatus(f)
	if g.vertex != nil && code == 429 && f.Message == "" {
		msg = "Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details."
	}
	var details []any
	if code == 429 {
		delay := "1s"
		switch {
		case f.RetryDelay != "":
			delay = f.RetryDelay // as given: a test of the gateway's parser may send it malformed
		case f.RetryAfter != "":
			delay = f.RetryAfter + "s"
		}
		if g.vertex == nil {
			// The Gemini API says which quota, then how long to wait.
			details = append(details, map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
				"violations": []any{map[string]any{"quotaMetric": "generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count",
					"quotaId": "GenerateContentPaidTierInputTokensPerModelPerMinute", "quotaValue": "1000000"}}},
				map[string]any{"@type": "type.googleapis.com/google.rpc.Help",
					"links": []any{map[string]any{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}}})
		}
		details = append(details, map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay})
	}
	googleError(x.w, code, status, msg, details)
}

// modelNotFound is Google's message for a model it does not have: the
// Gemini API's, naming the method, or Vertex AI's, naming the publisher
// model's full resource.
func (g geminiCodec) modelNotFound(x *exchange) string {
	if g.vertex != nil {
		return vertexModelNotFound(x.r, "google", x.req.model)
	}
	method := "generateContent"
	if x.req.stream {
		method = "streamGenerateContent"
	}
	return "models/" + x.req.model + " is not found for API version " + geminiVersion(x.r) + ", or is not supported for " + method +
		". Call ListModels to see the list of available models and their supported methods."
}

// geminiVersion is the API version a Gemini API request names.
func geminiVersion(r *http.Request) string {
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		return "v1"
	}
	return "v1beta"
}

// googleStatus is the HTTP code, status and message of a fault, in
// Google's canonical codes (cloud.google.com/apis/design/errors).
func googleStatus(f *Fault) (int, string, string) {
	code := f.Status
	switch f.Type {
	case FaultQuota:
		code = 429
	case FaultContextLength:
		return 400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
	}
	if code == 0 {
		code = 500
	}
	status, msg := "INTERNAL", "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"
	switch code {
	case 400:
		status, msg = "INVALID_ARGUMENT", "Request contains an invalid argument."
	case 401:
		status, msg = "UNAUTHENTICATED", "Request had invalid authentication credentials."
	case 403:
		status, msg = "PERMISSION_DENIED", "The caller does not have permission"
	case 404:
		status, msg = "NOT_FOUND", "Requested entity was not found."
	case 429:
		status, msg = "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
	case 499:
		status, msg = "CANCELLED", "The operation was cancelled."
	case 503:
		status, msg = "UNAVAILABLE", "The model is overloaded. Please try again later."
	case 504:
		status, msg = "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."
	}
	if f.ErrorType != "" {
		status = f.ErrorType
	}
	if f.Message != "" {
		msg = f.Message
	}
	return code, status, msg
}

// gmFinish names a finish reason as Gemini does.
func gmFinish(finish string) string {
	switch finish {
	case finishLength:
		return "MAX_TOKENS"
	}
	return "STOP" // a function call also ends with STOP
}

func gmUsage(u usage) map[string]any {
	m := map[string]any{"promptTokenCount": u.input, "candidatesTokenCount": u.output, "totalTokenCount": u.input + u.output,
		"promptTokensDetails": []any{map[string]any{"modality": "TEXT", "tokenCount": u.input}}}
	if u.cached > 0 {
		m["cachedContentTokenCount"] = u.cached
	}
	return m
}

// candidate is candidate index of a response.
func candidate(index int, parts []any, finish string) map[string]any {
	cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": index}
	if finish != "" {
		cand["finishReason"] = gmFinish(finish)
	}
	return cand
}

// responseOf is a GenerateContentResponse of candidates.
func (g geminiCodec) responseOf(x *exchange, candidates []any, u *usage) map[string]any {
	out := map[string]any{"candidates": candidates, "modelVersion": x.req.model, "responseId": "mock-" + x.id}
	if u != nil {
		out["usageMetadata"] = gmUsage(*u)
	}
	if g.vertex != nil {
		out["createTime"] = time.Now().UTC().Format(time.RFC3339Nano)
	}
	return out
}

func (g geminiCodec) body(x *exchange, a *answer) []byte {
	var cands []any
	for i, c := range append([]*answer{a}, a.others...) {
		var parts []any
		if c.tool != nil {
			parts = append(parts, map[string]any{"functionCall": map[string]any{"name": c.tool.name, "args": json.RawMessage(c.tool.args)}})
		} else {
			parts = append(parts, map[string]any{"text": c.text})
		}
		cands = append(cands, candidate(i, parts, c.finish))
	}
	b, _ := json.Marshal(g.responseOf(x, cands, &a.usage))
	return b
}

// gmStream is a streamGenerateContent?alt=sse answer: each chunk a whole
// GenerateContentResponse in a data: line, the last with finishReason and
// usageMetadata; no terminator.
//
// Without alt=sse the answer is, as Google sends it, one JSON array of
// those responses, written as they come.
type gmStream struct {
	g    geminiCodec
	x    *exchange
	name string
	// args are each candidate's function call arguments so far.
	args []string
	// array: no alt=sse; n counts the elements written.
	array bool
	n     int
	// cands is how many candidates the stream carries; idx the one the
	// chunks from now on belong to (choicer).
	cands, idx int
}

func (s *gmStream) choices(n int) { s.cands = n }
func (s *gmStream) choice(i int)  { s.idx = i }

func (g geminiCodec) streamer(x *exchange) streamer {
	return &gmStream{g: g, x: x, array: x.r.URL.Query().Get("alt") != "sse"}
}

func (s *gmStream) header(h http.Header) {
	if s.array {
		h.Set("Content-Type", "application/json; charset=UTF-8")
		return
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
}

func (s *gmStream) event(v any) []byte {
	b, _ := json.Marshal(v)
	if s.array {
		sep := ",\r\n"
		if s.n == 0 {
			sep = "["
		}
		s.n++
		return append([]byte(sep), b...)
	}
	return append(append([]byte("data: "), b...), "\r\n\r\n"...)
}

func (s *gmStream) start() []byte { return nil }

func (s *gmStream) text(p string) []byte {
	u := s.x.usage(0)
	return s.event(s.g.responseOf(s.x, []any{candidate(s.idx, []any{map[string]any{"text": p}}, "")}, &u))
}

func (s *gmStream) toolStart(_, name string) []byte { s.name = name; return nil }

// toolArgs sends the function call whole, with its last piece: Gemini
// does not stream a call's arguments.
func (s *gmStream) toolArgs(p string, last bool) []byte {
	for len(s.args) <= s.idx {
		s.args = append(s.args, "")
	}
	s.args[s.idx] += p
	if !last {
		return nil
	}
	return s.event(s.g.responseOf(s.x, []any{candidate(s.idx, []any{map[string]any{"functionCall": map[string]any{"name": s.name, "args": json.RawMessage(s.args[s.idx])}}}, "")}, nil))
}

// finish ends every candidate in one last chunk, with the usage.
func (s *gmStream) finish(finish string, u usage, terminate bool) []byte {
	var cands []any
	for i := range max(1, s.cands) {
		cands = append(cands, candidate(i, []any{map[string]any{"text": ""}}, finish))
	}
	b := s.event(s.g.responseOf(s.x, cands, &u))
	if s.array && terminate {
		b = append(b, ']')
	}
	return b
}

func (s *gmStream) malformed() []byte {
	return []byte("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"garbage\r\n\r\n")
}

func (s *gmStream) fail(f *Fault) []byte {
	code, status, msg := googleStatus(&Fault{Status: orInt(f.Status, 503), ErrorType: f.ErrorType, Message: f.Message})
	return s.event(map[string]any{"error": map[string]any{"code": code, "message": msg, "status": status}})
}

func orInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// blocked answers a content_policy fault as Gemini does, with a 200: a
// blocked prompt (promptFeedback.blockReason SAFETY, no candidates), or,
// when the fault's error_type names a finish reason (SAFETY, RECITATION,
// BLOCKLIST, PROHIBITED_CONTENT, SPII), a candidate stopped for it with no
// content. A streamed request gets it as its one chunk.
func (g geminiCodec) blocked(x *exchange, f *Fault) {
	x.billPrompt()
	rating := []any{map[string]any{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}}
	resp := map[string]any{"usageMetadata": gmUsage(x.usage(0)), "modelVersion": x.req.model, "responseId": "mock-" + x.id}
	if f.ErrorType == "" {
		resp["promptFeedback"] = map[string]any{"blockReason": "SAFETY", "safetyRatings": rating}
	} else {
		resp["candidates"] = []any{map[string]any{"finishReason": f.ErrorType, "index": 0, "safetyRatings": rating}}
	}
	if !x.req.stream {
		writeJSON(x.w, 200, resp)
		return
	}
	st := g.streamer(x).(*gmStream)
	st.header(x.w.Header())
	x.w.WriteHeader(200)
	b := st.event(resp)
	if st.array {
		b = append(b, ']')
	}
	_, _ = x.w.Write(b)
}
