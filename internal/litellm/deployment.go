package litellm

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/oncegate/oncegate/internal/catalog"
)

// provider is one oncegate provider the translation writes; deployments
// with the same endpoint and credentials share one.
type provider struct {
	id      string
	typ     string
	fields  [][2]string // key, value as written (already quoted)
	comment []string
	// boundary is where data sent to it travels, and why.
	boundary, boundaryWhy string
	// continuation is how its routes continue a partial answer.
	continuation string
	sig          string // identity for sharing
}

// route is one deployment as a route, before it is placed in an alias.
type route struct {
	d        Deployment
	prov     *provider
	model    string // sent upstream
	lookup   string // the name the catalogue knows it by ("" if none)
	family   string
	price    string // "{…}" or ""
	priceWhy string
	caps     []string // capability fields beyond continuation, "key: value"
	notes    []string
	weight   int
	rpm, tpm int
	attempts int // from the deployment's own num_retries, 0 if unset
}

// env reads a value LiteLLM lets come from the environment
// (os.environ/NAME): the variable's name, or "" for a literal.
func envName(v string) string {
	if name, ok := strings.CutPrefix(v, "os.environ/"); ok {
		return strings.TrimSpace(name)
	}
	return ""
}

// translator holds what the translation has made so far.
type translator struct {
	c         *Config
	lookup    func(string) (string, bool)
	providers []*provider
	envs      []string // variables the output names, in order
	notes     []string // what has no equivalent, for the head comment
}

func (t *translator) needEnv(name string) {
	for _, e := range t.envs {
		if e == name {
			return
		}
	}
	t.envs = append(t.envs, name)
}

// plain reads a non-secret parameter (an endpoint, a version, a region)
// that LiteLLM may take from the environment: the import reads the
// variable now, as LiteLLM would at start.
func (t *translator) plain(s Section, k string) (string, string, error) {
	v, ok, err := s.String(k)
	if !ok || err != nil {
		return "", "", err
	}
	name := envName(v)
	if name == "" {
		return v, "", nil
	}
	val, set := t.lookup(name)
	if !set || val == "" {
		return "", "", &Error{File: s.file, Line: s.nodes[k].Line, Col: s.nodes[k].Column, Path: s.key(k),
			Msg: fmt.Sprintf("os.environ/%s: the variable is not set; oncegate writes %s into its configuration, so the import reads it now", name, k)}
	}
	return val, fmt.Sprintf("%s from %s at import", k, name), nil
}

// secret maps LiteLLM's key parameter to the variable oncegate reads:
// os.environ/NAME is NAME; a key written in the file becomes a variable
// named for the provider, which the operator must set.
func (t *translator) secret(s Section, k, fallback string) (name, note string, err error) {
	v, ok, err := s.String(k)
	if err != nil {
		return "", "", err
	}
	switch {
	case !ok || v == "":
		if fallback == "" {
			return "", "", nil
		}
		t.needEnv(fallback)
		return fallback, "LiteLLM's default variable for this provider", nil
	case envName(v) != "":
		t.needEnv(envName(v))
		return envName(v), "", nil
	}
	if fallback == "" {
		fallback = "LITELLM_KEY"
	}
	t.needEnv(fallback)
	return fallback, fmt.Sprintf("%s (%s) held the key itself: oncegate reads keys from the environment only, so set %s to it", s.key(k), s.Pos(k), fallback), nil
}

// translateDeployment makes a route, and its provider, of one deployment.
// It returns nil and a reason for a deployment that has no equivalent.
func (t *translator) translateDeployment(d Deployment) (*route, string, error) {
	prefix, model, found := strings.Cut(d.Model, "/")
	if !found {
		prefix, model = "openai", d.Model // LiteLLM's default provider
	}
	r := &route{d: d, model: model, weight: 1}
	p := &provider{}
	var err error
	switch prefix {
	case "azure":
		err = t.azure(d, p, r)
	case "bedrock":
		err = t.bedrock(d, p, r)
	case "vertex_ai", "vertex_ai_beta":
		err = t.vertex(d, p, r)
	case "gemini":
		err = t.gemini(d, p, r)
	case "anthropic":
		err = t.anthropic(d, p, r)
	case "openai", "hosted_vllm", "text-completion-openai", "openai_like":
		err = t.openAICompatible(d, prefix, p, r)
	default:
		if !d.Params.Has("api_base") {
			return nil, fmt.Sprintf("provider %q has no oncegate type and no api_base to reach it as OpenAI-compatible", prefix), nil
		}
		err = t.openAICompatible(d, prefix, p, r)
	}
	if err != nil {
		return nil, "", err
	}
	if err := t.routeDetails(d, r); err != nil {
		return nil, "", err
	}
	r.prov = t.share(p)
	return r, "", nil
}

// share returns the provider already made with p's endpoint and
// credentials, or adds p under a unique id.
func (t *translator) share(p *provider) *provider {
	var b strings.Builder
	fmt.Fprint(&b, p.typ)
	for _, f := range p.fields {
		fmt.Fprint(&b, "|", f[0], "=", f[1])
	}
	p.sig = b.String()
	for _, q := range t.providers {
		if q.sig == p.sig {
			return q
		}
	}
	base := slug(p.id)
	p.id = base
	for n := 2; t.providerID(p.id); n++ {
		p.id = fmt.Sprintf("%s-%d", base, n)
	}
	t.providers = append(t.providers, p)
	return p
}

func (t *translator) providerID(id string) bool {
	for _, q := range t.providers {
		if q.id == id {
			return true
		}
	}
	return false
}

func (t *translator) azure(d Deployment, p *provider, r *route) error {
	base, why, err := t.plain(d.Params, "api_base")
	if err != nil {
		return err
	}
	if base == "" {
		return &Error{File: t.c.File, Path: d.Params.key("api_base"), Msg: "missing: an azure/ deployment needs its resource endpoint"}
	}
	p.typ, p.id = "azure-openai", "azure-"+firstLabel(base)
	p.fields = append(p.fields, [2]string{"base_url", q(base)})
	if why != "" {
		p.comment = append(p.comment, why)
	}
	version, why, err := t.plain(d.Params, "api_version")
	if err != nil {
		return err
	}
	if version != "" {
		p.fields = append(p.fields, [2]string{"api_version", q(version)})
		if why != "" {
			p.comment = append(p.comment, why)
		}
	} else {
		p.comment = append(p.comment, "no api_version: the v1 API ({base_url}/openai/v1/…)")
	}
	if d.Params.Has("tenant_id") || d.Params.Has("azure_ad_token") || d.Params.Has("client_id") {
		p.fields = append(p.fields, [2]string{"auth", "entra"})
		for _, k := range []string{"tenant_id", "client_id"} {
			v, _, err := t.plain(d.Params, k)
			if err != nil {
				return err
			}
			if v != "" {
				p.fields = append(p.fields, [2]string{k, q(v)})
			}
		}
		p.comment = append(p.comment, "Microsoft Entra ID tokens from the Azure default credential chain (AZURE_CLIENT_SECRET, workload or managed identity, az login)")
	} else {
		key, note, err := t.secret(d.Params, "api_key", "AZURE_API_KEY")
		if err != nil {
			return err
		}
		p.fields = append(p.fields, [2]string{"api_key_env", key})
		if note != "" {
			p.comment = append(p.comment, note)
		}
	}
	p.boundary, p.boundaryWhy = "external", "a cloud provider"
	p.continuation = "none" // azure-openai continues nothing (docs/providers.md)
	// LiteLLM prices an Azure deployment by model_info.base_model.
	if bm, ok, _ := d.Info.String("base_model"); ok {
		r.lookup = strings.TrimPrefix(bm, "azure/")
	}
	return nil
}

func (t *translator) bedrock(d Deployment, p *provider, r *route) error {
	for _, mode := range []string{"converse/", "invoke/"} {
		r.model = strings.TrimPrefix(r.model, mode)
	}
	region, why, err := t.plain(d.Params, "aws_region_name")
	if err != nil {
		return err
	}
	if region == "" {
		if v, ok := t.lookup("AWS_REGION"); ok && v != "" {
			region, why = v, "region from AWS_REGION at import"
		} else {
			return &Error{File: t.c.File, Path: d.Params.key("aws_region_name"), Msg: "missing, and AWS_REGION is not set: a bedrock/ deployment needs its region"}
		}
	}
	p.typ, p.id = "bedrock", "bedrock-"+region
	p.fields = append(p.fields, [2]string{"region", q(region)})
	if why != "" {
		p.comment = append(p.comment, why)
	}
	for _, k := range []string{"aws_bedrock_runtime_endpoint", "api_base"} {
		if v, why, err := t.plain(d.Params, k); err != nil {
			return err
		} else if v != "" {
			p.fields = append(p.fields, [2]string{"base_url", q(v)})
			if why != "" {
				p.comment = append(p.comment, why)
			}
			break
		}
	}
	if v, _, err := t.plain(d.Params, "aws_profile_name"); err != nil {
		return err
	} else if v != "" {
		p.fields = append(p.fields, [2]string{"aws_profile", q(v)})
	}
	standard := map[string]string{"aws_access_key_id": "AWS_ACCESS_KEY_ID", "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY", "aws_session_token": "AWS_SESSION_TOKEN"}
	for _, k := range []string{"aws_access_key_id", "aws_secret_access_key", "aws_session_token"} {
		v, ok, err := d.Params.String(k)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if name := envName(v); name == standard[k] {
			t.needEnv(name)
			continue
		}
		p.comment = append(p.comment, fmt.Sprintf("%s: credentials come from the AWS default chain: set %s to what %s named", d.Params.key(k), standard[k], d.Params.Raw(k)))
		t.needEnv(standard[k])
	}
	if !d.Params.Has("aws_access_key_id") && !d.Params.Has("aws_profile_name") {
		p.comment = append(p.comment, "credentials from the AWS default chain, as LiteLLM's")
	}
	p.boundary, p.boundaryWhy = "external", "a cloud provider"
	if familyOf(r.model) == "anthropic" {
		p.continuation = "assistant_prefill"
	} else {
		p.continuation = "none"
	}
	return nil
}

func (t *translator) vertex(d Deployment, p *provider, r *route) error {
	project, why1, err := t.plainOrEnv(d.Params, "vertex_project", "VERTEXAI_PROJECT")
	if err != nil {
		return err
	}
	location, why2, err := t.plainOrEnv(d.Params, "vertex_location", "VERTEXAI_LOCATION")
	if err != nil {
		return err
	}
	publisher := "google"
	if familyOf(r.model) == "anthropic" {
		publisher = "anthropic"
	}
	p.typ, p.id = "vertex", "vertex-"+location
	if publisher == "anthropic" {
		p.id += "-anthropic"
	}
	p.fields = append(p.fields, [2]string{"project", q(project)}, [2]string{"location", q(location)}, [2]string{"publisher", publisher})
	for _, w := range []string{why1, why2} {
		if w != "" {
			p.comment = append(p.comment, w)
		}
	}
	creds, ok, err := d.Params.String("vertex_credentials")
	if err != nil {
		return err
	}
	name := envName(creds)
	if !ok || name == "" {
		name = "GOOGLE_APPLICATION_CREDENTIALS"
		if ok {
			p.comment = append(p.comment, fmt.Sprintf("%s named %q: set %s to that service-account file's path", d.Params.key("vertex_credentials"), creds, name))
		}
	}
	t.needEnv(name)
	p.fields = append(p.fields, [2]string{"credentials_file_env", name})
	p.comment = append(p.comment, name+" holds the path of a service-account JSON file")
	p.boundary, p.boundaryWhy = "external", "a cloud provider"
	p.continuation = "none"
	if publisher == "anthropic" {
		p.continuation = "assistant_prefill"
	}
	return nil
}

// plainOrEnv is plain, else LiteLLM's environment default for k.
func (t *translator) plainOrEnv(s Section, k, env string) (string, string, error) {
	v, why, err := t.plain(s, k)
	if err != nil || v != "" {
		return v, why, err
	}
	if v, ok := t.lookup(env); ok && v != "" {
		return v, fmt.Sprintf("%s from %s at import", k, env), nil
	}
	return "", "", &Error{File: s.file, Path: s.key(k), Msg: fmt.Sprintf("missing, and %s is not set", env)}
}

func (t *translator) gemini(d Deployment, p *provider, r *route) error {
	p.typ, p.id = "gemini", "gemini"
	if v, why, err := t.plain(d.Params, "api_base"); err != nil {
		return err
	} else if v != "" {
		p.fields = append(p.fields, [2]string{"base_url", q(v)})
		if why != "" {
			p.comment = append(p.comment, why)
		}
	}
	key, note, err := t.secret(d.Params, "api_key", "GEMINI_API_KEY")
	if err != nil {
		return err
	}
	p.fields = append(p.fields, [2]string{"api_key_env", key})
	if note != "" {
		p.comment = append(p.comment, note)
	}
	p.boundary, p.boundaryWhy, p.continuation = "external", "a cloud provider", "none"
	return nil
}

func (t *translator) anthropic(d Deployment, p *provider, r *route) error {
	base, why, err := t.plain(d.Params, "api_base")
	if err != nil {
		return err
	}
	if base == "" {
		base = "https://api.anthropic.com"
	}
	base = strings.TrimSuffix(strings.TrimRight(base, "/"), "/v1")
	p.typ, p.id = "anthropic", "anthropic"
	p.fields = append(p.fields, [2]string{"base_url", q(base)})
	if why != "" {
		p.comment = append(p.comment, why)
	}
	key, note, err := t.secret(d.Params, "api_key", "ANTHROPIC_API_KEY")
	if err != nil {
		return err
	}
	p.fields = append(p.fields, [2]string{"api_key_env", key})
	if note != "" {
		p.comment = append(p.comment, note)
	}
	p.boundary, p.boundaryWhy, p.continuation = "external", "a cloud provider", "assistant_prefill"
	return nil
}

func (t *translator) openAICompatible(d Deployment, prefix string, p *provider, r *route) error {
	base, why, err := t.plain(d.Params, "api_base")
	if err != nil {
		return err
	}
	p.typ = "openai"
	switch {
	case base == "" && prefix == "hosted_vllm":
		return &Error{File: t.c.File, Path: d.Params.key("api_base"), Msg: "missing: a hosted_vllm/ deployment needs its server's address"}
	case base == "":
		base = "https://api.openai.com/v1"
	}
	official := strings.Contains(base, "api.openai.com")
	p.fields = append(p.fields, [2]string{"base_url", q(base)})
	if why != "" {
		p.comment = append(p.comment, why)
	}
	keyDefault := ""
	if official {
		keyDefault = "OPENAI_API_KEY"
	}
	key, note, err := t.secret(d.Params, "api_key", keyDefault)
	if err != nil {
		return err
	}
	if key == "" && !official && prefix != "hosted_vllm" && prefix != "openai" {
		key = strings.ToUpper(slugUnderscore(prefix)) + "_API_KEY" // LiteLLM's name for this provider's key
		t.needEnv(key)
		note = "LiteLLM's default variable for " + prefix
	}
	if key != "" {
		p.fields = append(p.fields, [2]string{"api_key_env", key})
	}
	if note != "" {
		p.comment = append(p.comment, note)
	}
	switch {
	case official:
		p.id, p.boundary, p.boundaryWhy, p.continuation = "openai", "external", "a cloud provider", "none"
	case prefix == "hosted_vllm":
		p.id, p.continuation = "vllm-"+strings.TrimPrefix(firstLabel(base), "vllm-"), "continue_final_message"
		p.boundary, p.boundaryWhy = hostBoundary(base, "private", "a vLLM server: assumed to run on your own machines — say external if a third party runs it")
	default:
		p.id, p.continuation = prefix+"-"+firstLabel(base), "none"
		p.boundary, p.boundaryWhy = hostBoundary(base, "external", "an OpenAI-compatible server on the internet")
		if prefix != "openai" {
			p.comment = append(p.comment, fmt.Sprintf("LiteLLM's %s/ provider, reached as OpenAI-compatible at its api_base", prefix))
		}
	}
	return nil
}

// hostBoundary is where data sent to base travels, judged by its host:
// loopback is local, a private address or an in-cluster name is
// private, anything else orElse.
func hostBoundary(base, orElse, why string) (string, string) {
	u, err := url.Parse(base)
	if err != nil || u.Hostname() == "" {
		return orElse, why
	}
	h := strings.ToLower(u.Hostname())
	if h == "localhost" {
		return "local", "on this machine (localhost)"
	}
	if ip := net.ParseIP(h); ip != nil {
		switch {
		case ip.IsLoopback():
			return "local", "on this machine (a loopback address)"
		case ip.IsPrivate() || ip.IsLinkLocalUnicast():
			return "private", "a private network address"
		}
		return orElse, why
	}
	for _, suffix := range []string{".local", ".internal", ".svc", ".cluster.local", ".lan", ".home.arpa", ".corp"} {
		if strings.HasSuffix(h, suffix) {
			return "private", "an internal host name"
		}
	}
	if !strings.Contains(h, ".") {
		return "private", "a host name without a domain: an internal server"
	}
	return orElse, why
}

// routeDetails reads a deployment's prices, limits and capabilities, from
// LiteLLM's own figures first, then the model catalogue.
func (t *translator) routeDetails(d Deployment, r *route) error {
	if r.lookup == "" {
		r.lookup = r.model
	}
	m, known := catalog.Lookup(r.lookup)
	if !known && r.lookup != r.model {
		m, known = catalog.Lookup(r.model)
	}
	r.family = familyOf(r.lookup)
	if known {
		r.family = m.Family
	}
	in, out, ok, err := litellmPrice(d)
	if err != nil {
		return err
	}
	switch {
	case ok:
		r.price = fmt.Sprintf("{input_usd_per_mtok: %s, output_usd_per_mtok: %s}", num(in*1e6), num(out*1e6))
		r.priceWhy = "from the LiteLLM config's cost per token"
	case known && r.lookup != r.model:
		r.price = fmt.Sprintf("{input_usd_per_mtok: %s, output_usd_per_mtok: %s}", num(m.Input), num(m.Output))
		r.priceWhy = "the catalogue's price of base_model " + r.lookup + " (oncegate models)"
	case known:
		r.priceWhy = "price: the catalogue's for " + m.Name + " (oncegate models)"
	default:
		r.price = "{input_usd_per_mtok: 0, output_usd_per_mtok: 0}"
		r.priceWhy = "no price known (not in the LiteLLM config, nor in the catalogue): billed as free until you set one"
	}
	// Capabilities: LiteLLM sends every parameter to every deployment,
	// so the routes accept tools and stream unless model_info says not.
	input := "[text]"
	if v, ok, err := d.Info.Bool("supports_vision"); err != nil {
		return err
	} else if (ok && v) || (!ok && seesImages(r.family, r.lookup)) {
		input = "[text, image]"
	}
	tools := true
	if v, ok, err := d.Info.Bool("supports_function_calling"); err != nil {
		return err
	} else if ok {
		tools = v
	}
	schema := r.family == "openai" || r.family == "google"
	if v, ok, err := d.Info.Bool("supports_response_schema"); err != nil {
		return err
	} else if ok {
		schema = v
	}
	r.caps = append(r.caps, "input: "+input, fmt.Sprintf("tools: %t", tools), fmt.Sprintf("json_schema: %t", schema), "streaming: true")
	ctx, out2 := int64(0), int64(0)
	for _, k := range []string{"max_input_tokens", "max_tokens"} {
		if v, ok, err := d.Info.Number(k); err != nil {
			return err
		} else if ok && v >= 1 && ctx == 0 {
			ctx = int64(v)
		}
	}
	if v, ok, err := d.Info.Number("max_output_tokens"); err != nil {
		return err
	} else if ok && v >= 1 {
		out2 = int64(v)
	}
	if known && r.lookup != r.model {
		ctx, out2 = cmpOr(ctx, m.Context), cmpOr(out2, m.MaxOutput)
	}
	if ctx > 0 {
		r.caps = append(r.caps, fmt.Sprintf("max_context_tokens: %d", ctx))
	}
	if out2 > 0 {
		r.caps = append(r.caps, fmt.Sprintf("max_output_tokens: %d", out2))
	}
	if !known && ctx == 0 {
		r.notes = append(r.notes, "context window unknown: 8192 assumed; set capabilities.max_context_tokens (vLLM: its --max-model-len)")
	}
	for _, src := range []Section{d.Params, d.Entry} {
		for _, k := range []string{"rpm", "tpm", "weight"} {
			v, ok, err := src.Number(k)
			if err != nil {
				return err
			}
			if !ok || v < 1 {
				continue
			}
			switch k {
			case "rpm":
				r.rpm = int(v)
			case "tpm":
				r.tpm = int(v)
			case "weight":
				r.weight = int(v + 0.5)
			}
		}
	}
	for _, k := range []string{"num_retries", "max_retries"} {
		if v, ok, err := d.Params.Number(k); err != nil {
			return err
		} else if ok && v >= 0 {
			r.attempts = int(v) + 1
		}
	}
	for _, k := range []string{"timeout", "stream_timeout"} {
		if d.Params.Has(k) {
			r.notes = append(r.notes, fmt.Sprintf("%s: %s has no per-route equivalent: the alias's retry.deadline bounds the whole request, the provider's timeouts each attempt", d.Params.key(k), d.Params.Raw(k)))
		}
	}
	return nil
}

func cmpOr(a, b int64) int64 {
	if a != 0 {
		return a
	}
	return b
}

// litellmPrice reads input_cost_per_token and output_cost_per_token from
// litellm_params, else model_info (USD per token).
func litellmPrice(d Deployment) (in, out float64, ok bool, err error) {
	for _, s := range []Section{d.Params, d.Info} {
		i, iok, err := s.Number("input_cost_per_token")
		if err != nil {
			return 0, 0, false, err
		}
		o, ook, err := s.Number("output_cost_per_token")
		if err != nil {
			return 0, 0, false, err
		}
		if iok || ook {
			if i < 0 || o < 0 {
				return 0, 0, false, &Error{File: s.file, Path: s.key("input_cost_per_token"), Msg: "a negative price"}
			}
			return i, o, true, nil
		}
	}
	return 0, 0, false, nil
}

// familyOf guesses a model's family from its name when the catalogue
// does not know it: the maker's name, as LiteLLM's own model names carry
// it.
func familyOf(model string) string {
	m := strings.ToLower(model)
	if e, ok := catalog.Lookup(model); ok {
		return e.Family
	}
	for _, f := range []struct{ family, marks string }{
		{"anthropic", "claude"}, {"google", "gemini gemma"}, {"openai", "gpt- o1 o3 o4 davinci text-embedding"},
		{"meta", "llama"}, {"mistral", "mistral mixtral codestral"}, {"amazon", "nova titan"},
		{"qwen", "qwen"}, {"deepseek", "deepseek"}, {"cohere", "command"},
	} {
		for _, mark := range strings.Fields(f.marks) {
			if strings.Contains(m, mark) {
				return f.family
			}
		}
	}
	return m // unknown: the model is its own family
}

// seesImages guesses whether a model takes images when model_info does
// not say.
func seesImages(family, model string) bool {
	m := strings.ToLower(model)
	switch family {
	case "anthropic", "google":
		return true
	case "openai":
		return strings.Contains(m, "gpt-4o") || strings.Contains(m, "gpt-4.1") || strings.Contains(m, "gpt-5") || strings.Contains(m, "o3") || strings.Contains(m, "o4")
	case "amazon":
		return strings.Contains(m, "nova-pro") || strings.Contains(m, "nova-lite")
	}
	return false
}

// firstLabel is the first label of base's host ("east" of
// https://east.openai.azure.com), for names.
func firstLabel(base string) string {
	u, err := url.Parse(base)
	if err != nil || u.Hostname() == "" {
		return "host"
	}
	h := u.Hostname()
	if net.ParseIP(h) != nil {
		return strings.NewReplacer(".", "-", ":", "-").Replace(h)
	}
	label, _, _ := strings.Cut(h, ".")
	return label
}
