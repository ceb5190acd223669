package httpfront

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// Paths as clients already spell them (docs/api.md, "Paths"): the router
// knows each endpoint under one path, its /v1 one; canonical maps the
// other spellings onto it before routing, here and nowhere else
// (Canonical):
//
//   - /chat/completions, /models, … (an SDK whose base URL lacks /v1):
//     /v1 + the path, when that is an endpoint;
//   - /openai/v1/… (the Azure OpenAI v1 API): /v1/…;
//   - /openai/deployments/{alias}/chat/completions and …/embeddings (an
//     Azure OpenAI client): /v1/chat/completions and /v1/embeddings,
//     the deployment naming the alias (DeploymentOf);
//   - /health/liveliness and /health/readiness: /healthz and /readyz.
//
// A path none of these fit is routed as it is: 404 or 405 in the
// caller's protocol. The access log shows the canonical path, one per
// endpoint.

// probeAliases are the health probes' other names (also drain.IsProbe's).
var probeAliases = map[string]string{"/health/liveliness": "/healthz", "/health/readiness": "/readyz"}

// deploymentEndpoints are the endpoints an Azure deployment path serves.
var deploymentEndpoints = map[string]string{"chat/completions": "/v1/chat/completions", "embeddings": "/v1/embeddings"}

// deploymentKey is the context key of an Azure deployment's name.
type deploymentKey struct{}

// DeploymentOf is the alias an Azure deployment path named, "" for none.
func DeploymentOf(ctx context.Context) string {
	d, _ := ctx.Value(deploymentKey{}).(string)
	return d
}

// Canonical is r on its endpoint's canonical path in mux (above), or r
// itself.
func Canonical(r *http.Request, mux *http.ServeMux) *http.Request {
	p := r.URL.Path
	if strings.HasPrefix(p, "/v1/") || !isClean(r.URL.EscapedPath()) {
		return r // the common case; and a path not clean is unroutable's to refuse
	}
	if to, ok := probeAliases[p]; ok {
		return withPath(r, to)
	}
	if rest, ok := strings.CutPrefix(p, "/openai/deployments/"); ok {
		dep, endpoint, _ := strings.Cut(rest, "/")
		if to, ok := deploymentEndpoints[endpoint]; ok && dep != "" {
			r = withPath(r, to)
			return r.WithContext(context.WithValue(r.Context(), deploymentKey{}, dep))
		}
		return r
	}
	if rest, ok := strings.CutPrefix(p, "/openai/v1/"); ok {
		if to := "/v1/" + rest; routed(mux, r, to) {
			return withPath(r, to)
		}
		return r
	}
	if !routed(mux, r, p) && routed(mux, r, "/v1"+p) {
		return withPath(r, "/v1"+p)
	}
	return r
}

// routed reports whether the router has an endpoint of its own at path
// (any method): not only the catch-all that answers 404.
func routed(mux *http.ServeMux, r *http.Request, path string) bool {
	probe := &http.Request{Method: r.Method, Host: r.Host, URL: &url.URL{Path: path}}
	_, pattern := mux.Handler(probe)
	return pattern != "" && pattern != "/"
}

// isClean reports whether p is rooted and without empty, `.` and `..`
// segments (a trailing slash allowed): a path the router would not
// redirect.
func isClean(p string) bool { return strings.HasPrefix(p, "/") && cleanPath(p) == p }

// withPath is a shallow copy of r asking for path instead.
func withPath(r *http.Request, path string) *http.Request {
	c := *r
	u := *r.URL
	u.Path, u.RawPath = path, ""
	c.URL = &u
	return &c
}
