package mock

import (
	"io"
	"net/http"
	"strconv"
)

// The Azure OpenAI fake (learn.microsoft.com/azure/ai-foundry/openai/reference):
// deployment URLs with api-version, the v1 API, the api-key header or a
// Microsoft Entra ID bearer token of the mock's own Entra fake
// (entra.go), and Azure's error shapes.

// DefaultAzureAPIKey is the api-key the Azure OpenAI fake accepts unless
// Config.AzureAPIKey says otherwise.
const DefaultAzureAPIKey = "azure-mock-key"

// azureDenied is Azure's answer to a wrong or missing api-key.
const azureDenied = "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."

// azureNoDeployment is Azure's answer for a deployment that does not exist.
const azureNoDeployment = "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."

// azureCodec answers as Azure OpenAI.
type azureCodec struct {
	oaWire
	key   string
	entra *entraAuth
}

func (m *Mock) azureKey() string {
	if m.cfg.AzureAPIKey != "" {
		return m.cfg.AzureAPIKey
	}
	return DefaultAzureAPIKey
}

// serveAzure answers chat completions on a deployment or the v1 API.
func (m *Mock) serveAzure(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	deployment := r.PathValue("deployment")
	if deployment != "" && r.URL.Query().Get("api-version") == "" {
		azureError(w, 404, "404", "Resource not found")
		return
	}
	a, in, err := decodeOpenAI(body)
	if err != nil {
		azureError(w, 400, "BadRequest", err.Error())
		return
	}
	if deployment != "" {
		a.model = deployment // the route's model is the deployment
	} else if a.model == "" {
		azureError(w, 400, "BadRequest", "model is required")
		return
	}
	c := azureCodec{oaWire: oaWire{azure: true, usage: in.StreamOptions != nil && in.StreamOptions.IncludeUsage}, key: m.azureKey(), entra: m.entra}
	x := m.begin(c, w, r, a)
	x.logprobs = in.Logprobs
	x.finishServe()
}

// serveAzureEmbeddings answers embeddings on a deployment or the v1 API.
func (m *Mock) serveAzureEmbeddings(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	deployment := r.PathValue("deployment")
	if deployment != "" && r.URL.Query().Get("api-version") == "" {
		azureError(w, 404, "404", "Resource not found")
		return
	}
	model, e, prompt, msg := parseEmbeddings(body, deployment != "")
	if msg != "" {
		azureError(w, 400, "BadRequest", msg)
		return
	}
	if deployment != "" {
		model = deployment
	}
	x := m.begin(azureCodec{key: m.azureKey(), entra: m.entra}, w, r, &ask{model: model, promptTokens: prompt})
	x.emb = e
	x.finishServe()
}

// authenticate takes the api-key, or else an Entra ID bearer token (as
// Azure does: a request with both is judged by its key).
func (c azureCodec) authenticate(x *exchange, _ []byte) bool {
	if k := x.r.Header.Get("api-key"); k == "" && x.r.Header.Get("Authorization") != "" && c.entra != nil {
		return c.entra.azureBearer(x.w, x.r.Header.Get("Authorization"))
	}
	if x.r.Header.Get("api-key") == c.key {
		return true
	}
	azureError(x.w, 401, "401", azureDenied)
	return false
}

// azureError writes Azure's own error shape: {"error": {"code", "message"}}.
func azureError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

func (c azureCodec) fail(x *exchange, f *Fault) {
	retryHeaders(x.w.Header(), f)
	switch f.Type {
	case FaultAuth:
		azureError(x.w, 401, "401", azureDenied)
		return
	case FaultContentPolicy:
		// The prompt tripped the content filter: a 400 whose innererror
		// carries the filter's results.
		filter := map[string]any{}
		for k, v := range oaFilterOK {
			filter[k] = v
		}
		filter["violence"] = map[string]any{"filtered": true, "severity": "medium"}
		filter["jailbreak"] = map[string]any{"filtered": false, "detected": false}
		writeJSON(x.w, 400, map[string]any{"error": map[string]any{
			"message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
			"type":    nil, "param": "prompt", "code": "content_filter", "status": 400,
			"innererror": map[string]any{"code": "ResponsibleAIPolicyViolation", "content_filter_result": filter}}})
		return
	case FaultContextLength:
		writeJSON(x.w, 400, map[string]any{"error": map[string]any{
			"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.",
			"type":    "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
		return
	case FaultQuota:
		azureError(x.w, 429, "insufficient_quota", "You exceeded your current quota, please check your plan and billing details.")
		return
	case FaultModelNotFound:
		// A deployment name the resource does not have (the v1 API
		// answers the same for its model).
		azureError(x.w, 404, "DeploymentNotFound", orDefault(f.Message, azureNoDeployment))
		return
	}
	status, code, msg := f.Status, f.ErrorCode, f.Message
	if status == 0 {
		status = 500
	}
	switch {
	case status == 429:
		if f.RetryAfter == "" && f.RetryAfterMS == "" {
			x.w.Header().Set("retry-after", "1")
			x.w.Header().Set("retry-after-ms", "1000")
		}
		x.w.Header().Set("x-ratelimit-remaining-requests", "0")
		x.w.Header().Set("x-ratelimit-remaining-tokens", "0")
		if code == "" {
			code = "429"
		}
		if msg == "" {
			secs := f.RetryAfter
			if secs == "" {
				secs = "1"
			}
			msg = "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after " + secs + " second. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."
		}
	case status == 503:
		code, msg = orDefault(code, "ServiceUnavailable"), orDefault(msg, "The service is temporarily unable to process your request. Please try again later.")
	case status >= 500:
		code, msg = orDefault(code, "InternalServerError"), orDefault(msg, "The server had an error while processing your request. Sorry about that!")
	default:
		code, msg = orDefault(code, strconv.Itoa(status)), orDefault(msg, http.StatusText(status))
	}
	azureError(x.w, status, code, msg)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
