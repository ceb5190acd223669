package azure

import (
	"net/http"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

func open(t *testing.T, base, version string) *Endpoint {
	t.Helper()
	ep, err := OpenAI.Open(provider.Config{Provider: &config.Provider{BaseURL: base, APIVersion: version}, APIKey: "k-123", KeySource: "AZURE_OPENAI_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	return ep.(*Endpoint)
}

func TestRequestURLs(t *testing.T) {
	in, err := provider.ParseRequest(provider.OpenAI, []byte(`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	emb, err := provider.ParseRequest(provider.Embeddings, []byte(`{"model":"embed","input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		base, version, model string
		in                   *provider.ClientRequest
		want                 string
	}{
		{"https://r.openai.azure.com/", "2024-10-21", "gpt 4o", in, "/openai/deployments/gpt%204o/chat/completions?api-version=2024-10-21"},
		{"https://r.openai.azure.com/openai", "2024-10-21", "d", emb, "/openai/deployments/d/embeddings?api-version=2024-10-21"},
		{"https://r.openai.azure.com", "", "d", in, "/openai/v1/chat/completions"},
		{"https://r.openai.azure.com", "", "d", emb, "/openai/v1/embeddings"},
	} {
		ep := open(t, c.base, c.version)
		out, err := ep.Request(c.in, provider.Target{Model: c.model}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ep.BaseURL() != "https://r.openai.azure.com" || out.Path != c.want {
			t.Errorf("%s %q: base %q path %q, want %q", c.base, c.version, ep.BaseURL(), out.Path, c.want)
		}
	}
	if _, err := OpenAI.Open(provider.Config{Provider: &config.Provider{BaseURL: "https://x", APIVersion: "2024&x=1"}}); err == nil {
		t.Error("an api_version that would change the query is refused")
	}
	if d := open(t, "https://x", "").Auth().Describe(); d != "api-key from AZURE_OPENAI_KEY" {
		t.Errorf("describe %q", d)
	}
}

// Azure's error shapes, as its documentation shows them.
func TestFault(t *testing.T) {
	ep := open(t, "https://x", "2024-10-21")
	for _, c := range []struct {
		name   string
		status int
		body   string
		kind   gw.Kind
		cause  gw.Cause
	}{
		{"invalid subscription key", 401, `{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{"bearer token refused (auth: entra)", 401, `{"statusCode": 401, "message": "Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired."}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{"identity without a role (auth: entra)", 401, `{"error":{"code":"PermissionDenied","message":"Principal does not have access to API/Operation."}}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{"access denied 403", 403, `{"error":{"code":"403","message":"Access denied due to Virtual Network/Firewall rules."}}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{"content filter", 400, `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"violence":{"filtered":true,"severity":"medium"}}}}}`, gw.KindPolicyDenied, ""},
		{"token rate limit", 429, `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds."}}`, gw.KindRateLimited, ""},
		{"quota", 429, `{"error":{"code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details."}}`, gw.KindAccountRefused, gw.CauseQuota},
		{"deployment not found", 404, `{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}`, gw.KindRouteUnavailable, ""},
		{"resource not found (no api-version, wrong path)", 404, `{"error":{"code":"404","message":"Resource not found"}}`, gw.KindRouteUnavailable, ""},
		{"context length", 400, `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, gw.KindRejected, gw.CauseContextLength},
		{"unavailable", 503, `{"error":{"code":"ServiceUnavailable","message":"The service is temporarily unable to process your request."}}`, gw.KindUnavailable, ""},
		{"bad request", 400, `{"error":{"code":"BadRequest","message":"Invalid value for 'temperature'."}}`, gw.KindRejected, ""},
	} {
		_, k, cause := ep.Fault(c.status, http.Header{}, []byte(c.body))
		if k != c.kind || cause != c.cause {
			t.Errorf("%s: %s/%s, want %s/%s", c.name, k, cause, c.kind, c.cause)
		}
	}
	if k, _ := ep.StreamFault(&provider.UpstreamError{Code: "content_filter", Message: "filtered"}); k != gw.KindPolicyDenied {
		t.Errorf("in-stream content filter: %s", k)
	}
}
