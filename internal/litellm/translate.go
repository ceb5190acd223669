package litellm

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Result is a translated configuration.
type Result struct {
	// YAML is the oncegate configuration, with what has no equivalent as
	// comments.
	YAML string
	// Env lists the environment variables it names, which serve needs.
	Env []string
}

// strategies maps LiteLLM's routing_strategy to a tier's strategy
// (docs/routing.md).
var strategies = map[string]string{
	"simple-shuffle":         "weighted",
	"least-busy":             "least_busy",
	"latency-based-routing":  "latency",
	"usage-based-routing":    "quota",
	"usage-based-routing-v2": "quota",
	"cost-based-routing":     "ordered",
}

// alias is one model group as an oncegate model.
type alias struct {
	name  string
	tiers [][]*route
	fam   []string
	class string
	notes []string
}

// Translate makes an oncegate configuration of c. lookup reads the
// environment for the non-secret values LiteLLM lets come from it
// (os.environ/NAME for an api_base, a version, a region), which oncegate
// writes into its file.
func Translate(c *Config, lookup func(string) (string, bool)) (*Result, error) {
	t := &translator{c: c, lookup: lookup}
	groups, order := map[string][]*route{}, []string(nil)
	for _, d := range c.Deployments {
		if strings.Contains(d.ModelName, "*") {
			t.notes = append(t.notes, fmt.Sprintf("%s (%q): wildcard model names have no equivalent: name each model", d.Path, d.ModelName))
			continue
		}
		if mode, _, _ := d.Info.String("mode"); mode != "" && mode != "chat" && mode != "completion" && mode != "embedding" {
			t.notes = append(t.notes, fmt.Sprintf("%s (%s, mode %s): not translated: oncegate serves chat and embeddings", d.Path, d.Model, mode))
			continue
		}
		r, why, err := t.translateDeployment(d)
		if err != nil {
			return nil, err
		}
		if r == nil {
			t.notes = append(t.notes, fmt.Sprintf("%s (%s): not translated: %s", d.Path, d.Model, why))
			continue
		}
		if _, seen := groups[d.ModelName]; !seen {
			order = append(order, d.ModelName)
		}
		groups[d.ModelName] = append(groups[d.ModelName], r)
	}
	if len(order) == 0 {
		return nil, &Error{File: c.File, Path: "model_list", Msg: "no deployment could be translated: " + strings.Join(t.notes, "; ")}
	}
	s, err := t.readSettings()
	if err != nil {
		return nil, err
	}
	var aliases []*alias
	for _, name := range order {
		a := &alias{name: name, tiers: [][]*route{groups[name]}}
		for _, to := range s.fallbacks[name] {
			if g, ok := groups[to]; ok && to != name {
				a.tiers = append(a.tiers, g)
			} else {
				a.notes = append(a.notes, fmt.Sprintf("fallback to %q dropped: no translated group of that name", to))
			}
		}
		a.classify()
		aliases = append(aliases, a)
	}
	var b strings.Builder
	t.write(&b, s, aliases)
	return &Result{YAML: b.String(), Env: t.envs}, nil
}

// classify chooses the alias's behaviour class: the routes of one alias
// share one (docs/configuration.md), so a class names the families it
// holds, and an alias of several families keeps a half-written answer
// on the route that began it.
func (a *alias) classify() {
	for _, tier := range a.tiers {
		for _, r := range tier {
			if !slices.Contains(a.fam, r.family) {
				a.fam = append(a.fam, r.family)
			}
		}
	}
	a.class = slug(a.name) + "." + strings.Join(a.fam, "+")
}

// settings are the router's and the proxy's settings, read.
type settings struct {
	strategy, strategyNote string
	retries                int // -1: unset
	deadline               string
	openFor                string
	fallbacks              map[string][]string
	dropParams             bool
	masterEnv, masterNote  string
	notes                  []string
}

// mapped are the keys of each section the translation reads; every other
// key becomes a comment.
var mapped = map[string][]string{
	"router_settings":  {"routing_strategy", "num_retries", "timeout", "cooldown_time", "fallbacks", "default_fallbacks"},
	"litellm_settings": {"drop_params", "num_retries", "request_timeout", "fallbacks", "default_fallbacks"},
	"general_settings": {"master_key"},
}

// noEquivalent says what oncegate does instead of a LiteLLM setting.
var noEquivalent = map[string]string{
	"allowed_fails":                "the circuit breaker opens on a failure ratio (breaker.failure_ratio, min_requests), not a count",
	"retry_after":                  "oncegate waits as the provider's Retry-After says, capped by retry.retry_after_cap",
	"context_window_fallbacks":     "a route whose context is too small is skipped before dispatch; list the larger group as a later tier to get this",
	"content_policy_fallbacks":     "a content-policy refusal is passed through, never shopped to another route",
	"success_callback":             "every request has a receipt (oncegate receipts), an access log line, Prometheus metrics and, with telemetry.otlp_endpoint, OTLP traces",
	"failure_callback":             "see success_callback",
	"callbacks":                    "see success_callback",
	"cache":                        "oncegate caches no answers; a repeated request with the same Idempotency-Key is replayed from the ledger",
	"database_url":                 "oncegate keeps its own store (store: postgres://… for several replicas); LiteLLM's keys and spend do not carry over: issue keys with POST /admin/keys",
	"redis_host":                   "several replicas share in-flight requests, breakers and budgets through coordination: redis://…",
	"redis_port":                   "see redis_host",
	"redis_password":               "see redis_host",
	"set_verbose":                  "log.level: debug",
	"json_logs":                    "log.format: json (the default)",
	"max_parallel_requests":        "tenants[].budget.max_concurrent, and per key",
	"model_group_alias":            "give the alias the name clients send",
	"enable_pre_call_checks":       "oncegate always checks context size and capabilities before dispatch",
	"alerting":                     "alert on the Prometheus metrics (docs/operations.md)",
	"store_model_in_db":            "models come from this file; oncegate reload re-reads it",
	"routing_strategy_args":        "the latency strategy explores on its own (docs/routing.md)",
	"default_team_settings":        "teams are tenants created with POST /admin/tenants",
	"max_budget":                   "tenants[].budget.cost_usd_per_day, and per key",
	"budget_duration":              "budgets are per day, per month and lifetime",
	"num_retries_per_request":      "retry.max_attempts",
	"allowed_fails_policy":         "see allowed_fails",
	"retry_policy":                 "oncegate decides retries by the outcome's class (docs/retries.md)",
	"turn_off_message_logging":     "bodies are never logged unless log.bodies: true",
	"telemetry":                    "no telemetry leaves the gateway",
	"disable_spend_logs":           "receipts are how requests are billed; receipt_retention bounds them",
	"enforce_user_param":           "no equivalent",
	"master_key_rotation":          "rotate the admin key by changing its variable and reloading",
	"proxy_batch_write_at":         "spend is written with each receipt",
	"health_check_interval":        "oncegate has /healthz and /readyz; routes' health is their circuit breakers",
	"background_health_checks":     "see health_check_interval",
	"use_redis_transaction_buffer": "see redis_host",
}

func (t *translator) readSettings() (*settings, error) {
	c := t.c
	s := &settings{retries: -1, fallbacks: map[string][]string{}}
	for _, sec := range []Section{c.Router, c.Settings, c.General} {
		for _, k := range sec.Keys {
			if slices.Contains(mapped[sec.Path], k) {
				continue
			}
			why := noEquivalent[k]
			if why == "" {
				why = "no equivalent"
			}
			s.notes = append(s.notes, fmt.Sprintf("%s: %s (%s) — %s", sec.key(k), sec.Raw(k), sec.Pos(k), why))
		}
	}
	for _, k := range c.Others {
		s.notes = append(s.notes, fmt.Sprintf("%s: not translated (set these variables in the gateway's environment instead)", k))
	}
	strategy, ok, err := c.Router.String("routing_strategy")
	if err != nil {
		return nil, err
	}
	if !ok {
		strategy = "simple-shuffle"
		s.strategyNote = "LiteLLM's default routing_strategy, simple-shuffle: spread by weight (rpm, tpm)"
	}
	s.strategy = strategies[strategy]
	switch {
	case s.strategy == "":
		s.strategy = "ordered"
		s.strategyNote = fmt.Sprintf("routing_strategy %q has no equivalent: ordered (the first route by priority)", strategy)
	case strategy == "cost-based-routing":
		s.strategyNote = "cost-based-routing: ordered, cheapest route first"
	case ok:
		s.strategyNote = "from routing_strategy " + strategy
	}
	for _, sec := range []Section{c.Router, c.Settings} { // the router's wins
		if v, ok, err := sec.Number("num_retries"); err != nil {
			return nil, err
		} else if ok && s.retries < 0 {
			if v < 0 || v > 20 {
				return nil, &Error{File: c.File, Path: sec.key("num_retries"), Msg: fmt.Sprintf("want 0 to 20, found %v", v)}
			}
			s.retries = int(v)
		}
	}
	for _, k := range []struct {
		sec Section
		key string
	}{{c.Router, "timeout"}, {c.Settings, "request_timeout"}} {
		if v, ok, err := k.sec.Number(k.key); err != nil {
			return nil, err
		} else if ok && s.deadline == "" {
			if v <= 0 {
				return nil, &Error{File: c.File, Path: k.sec.key(k.key), Msg: fmt.Sprintf("want seconds above 0, found %v", v)}
			}
			s.deadline = seconds(v)
		}
	}
	if v, ok, err := c.Router.Number("cooldown_time"); err != nil {
		return nil, err
	} else if ok {
		if v <= 0 {
			return nil, &Error{File: c.File, Path: c.Router.key("cooldown_time"), Msg: fmt.Sprintf("want seconds above 0, found %v", v)}
		}
		s.openFor = seconds(v)
	}
	for _, sec := range []Section{c.Router, c.Settings} {
		fbs, err := sec.Fallbacks("fallbacks")
		if err != nil {
			return nil, err
		}
		for _, f := range fbs {
			if _, set := s.fallbacks[f.From]; !set {
				s.fallbacks[f.From] = f.To
			}
		}
		def, err := sec.Strings("default_fallbacks")
		if err != nil {
			return nil, err
		}
		for _, d := range c.Deployments {
			if _, set := s.fallbacks[d.ModelName]; !set && len(def) > 0 && !slices.Contains(def, d.ModelName) {
				s.fallbacks[d.ModelName] = def
			}
		}
	}
	if v, ok, err := c.Settings.Bool("drop_params"); err != nil {
		return nil, err
	} else if ok {
		s.dropParams = v
	}
	if v, ok, err := c.General.String("master_key"); err != nil {
		return nil, err
	} else if ok && v != "" {
		s.masterEnv = envName(v)
		if s.masterEnv == "" {
			s.masterEnv = "LITELLM_MASTER_KEY"
			s.masterNote = fmt.Sprintf("general_settings.master_key (%s) held the key itself: oncegate reads keys from the environment only, so set LITELLM_MASTER_KEY to it", c.General.Pos("master_key"))
		}
		t.needEnv(s.masterEnv)
	} else {
		t.needEnv("ONCEGATE_KEY_DEFAULT") // the default tenant's key
	}
	return s, nil
}

// seconds writes LiteLLM's seconds as a duration.
func seconds(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10) + "s"
	}
	return strconv.FormatInt(int64(v*1000+0.5), 10) + "ms"
}

// write writes the configuration.
func (t *translator) write(b *strings.Builder, s *settings, aliases []*alias) {
	fmt.Fprintf(b, "# oncegate configuration translated from the LiteLLM proxy config %s\n", t.c.File)
	b.WriteString("# by `oncegate import litellm` (docs/migrating-from-litellm.md). Check it with\n")
	b.WriteString("# `oncegate check --config FILE` and read every comment: each says what was\n")
	b.WriteString("# chosen, or what LiteLLM had that oncegate does differently.\n")
	if len(t.envs) > 0 {
		b.WriteString("#\n# serve reads these environment variables: " + strings.Join(t.envs, ", ") + "\n")
	}
	if notes := append(slices.Clone(t.notes), s.notes...); len(notes) > 0 {
		b.WriteString("#\n# Not translated:\n")
		for _, n := range notes {
			writeComment(b, "", "  "+n)
		}
	}
	b.WriteString("\nlisten: 127.0.0.1:4000            # LiteLLM's port; serve --listen 0.0.0.0:4000 to listen on every interface as LiteLLM does\n")
	b.WriteString("store: sqlite://oncegate.db       # the ledger and receipts; postgres://… for several replicas\n")
	if s.masterEnv != "" {
		fmt.Fprintf(b, "admin_key_env: %s   # LiteLLM's master_key: the admin API and console\n", s.masterEnv)
		if s.masterNote != "" {
			writeComment(b, "", s.masterNote)
		}
		b.WriteString("admin_tenant: default             # as in LiteLLM, the master key also calls /v1/* (as tenant default)\n")
	}
	if s.dropParams {
		b.WriteString("drop_params: true                 # litellm_settings.drop_params: a parameter a route cannot carry is dropped and named in X-Oncegate-Dropped, not refused\n")
	}
	if s.openFor != "" {
		fmt.Fprintf(b, "breaker: {open_for: %s}           # router_settings.cooldown_time: how long a failing route rests\n", s.openFor)
	}
	b.WriteString("\ntenants:\n")
	if s.masterEnv != "" {
		b.WriteString("  - id: default                   # the master key's tenant; issue keys for it with POST /admin/keys\n")
	} else {
		b.WriteString("  - id: default                   # LiteLLM had no master_key: clients send the key in ONCEGATE_KEY_DEFAULT\n")
		b.WriteString("    api_key_env: ONCEGATE_KEY_DEFAULT\n")
	}
	b.WriteString("\nproviders:\n")
	for _, p := range t.providers {
		fmt.Fprintf(b, "  - id: %s\n    type: %s\n", p.id, p.typ)
		for _, f := range p.fields {
			fmt.Fprintf(b, "    %s: %s\n", f[0], f[1])
		}
		for _, c := range p.comment {
			writeComment(b, "    ", c)
		}
	}
	b.WriteString("\nroutes:\n")
	ids := map[*route]map[string]string{} // route → alias → id
	used := map[string]bool{}
	for _, a := range aliases {
		for ti, tier := range a.tiers {
			for _, r := range tier {
				id := slug(a.name) + "-" + r.prov.id
				if ti > 0 {
					id = slug(a.name) + "-fallback-" + slug(r.d.ModelName) + "-" + r.prov.id
				}
				if mid, ok, _ := r.d.Info.String("id"); ok && mid != "" && ti == 0 {
					id = slug(a.name) + "-" + slug(mid)
				}
				base := id
				for n := 2; used[id]; n++ {
					id = fmt.Sprintf("%s-%d", base, n)
				}
				used[id] = true
				if ids[r] == nil {
					ids[r] = map[string]string{}
				}
				ids[r][a.name+"\x00"+strconv.Itoa(ti)] = id
				t.writeRoute(b, id, a, r, s, ti > 0)
			}
		}
	}
	b.WriteString("\nmodels:\n")
	for _, a := range aliases {
		t.writeAlias(b, a, s, ids)
	}
}

func (t *translator) writeRoute(b *strings.Builder, id string, a *alias, r *route, s *settings, fallback bool) {
	fmt.Fprintf(b, "  - id: %s\n", id)
	if fallback {
		fmt.Fprintf(b, "    # LiteLLM's fallback from %s to %s\n", a.name, r.d.ModelName)
	}
	fmt.Fprintf(b, "    provider: %s\n    model: %s   # %s (%s:%d)\n", r.prov.id, q(r.model), r.d.Model, t.c.File, r.d.Line)
	caps := append(slices.Clone(r.caps), "continuation: "+r.prov.continuation)
	fmt.Fprintf(b, "    capabilities: {%s}\n", strings.Join(caps, ", "))
	fmt.Fprintf(b, "    behavior_class: %s\n", q(a.class))
	fmt.Fprintf(b, "    data_boundary: %s   # %s\n", r.prov.boundary, r.prov.boundaryWhy)
	attempts := 2
	switch {
	case r.attempts > 0:
		attempts = r.attempts
	case s.retries >= 0:
		attempts = s.retries + 1
	}
	fmt.Fprintf(b, "    max_attempts: %d\n", attempts)
	if r.price != "" {
		fmt.Fprintf(b, "    price: %s   # %s\n", r.price, r.priceWhy)
	} else {
		writeComment(b, "    ", r.priceWhy)
	}
	if r.weight > 1 {
		fmt.Fprintf(b, "    weight: %d\n", r.weight)
	} else if s.strategy == "weighted" && r.rpm > 0 {
		fmt.Fprintf(b, "    weight: %d   # LiteLLM's simple-shuffle weighs by rpm\n", r.rpm)
	}
	if r.rpm > 0 {
		fmt.Fprintf(b, "    rpm: %d\n", r.rpm)
	}
	if r.tpm > 0 {
		fmt.Fprintf(b, "    tpm: %d\n", r.tpm)
	}
	for _, n := range r.notes {
		writeComment(b, "    ", n)
	}
}

func (t *translator) writeAlias(b *strings.Builder, a *alias, s *settings, ids map[*route]map[string]string) {
	fmt.Fprintf(b, "  - name: %s\n", q(a.name))
	var tiers []string
	total := 0
	for ti, tier := range a.tiers {
		var names []string
		ordered := slices.Clone(tier)
		if s.strategy == "ordered" && strings.Contains(s.strategyNote, "cheapest") {
			slices.SortStableFunc(ordered, func(x, y *route) int { return strings.Compare(x.price, y.price) })
		}
		for _, r := range ordered {
			names = append(names, ids[r][a.name+"\x00"+strconv.Itoa(ti)])
		}
		total += len(names)
		if len(names) == 1 {
			tiers = append(tiers, names[0])
		} else {
			tiers = append(tiers, "["+strings.Join(names, ", ")+"]")
		}
	}
	comment := "the group's deployments share load"
	if len(a.tiers) > 1 {
		comment += "; then LiteLLM's fallbacks, in order"
	}
	fmt.Fprintf(b, "    routes: [%s]   # %s\n", strings.Join(tiers, ", "), comment)
	if slices.ContainsFunc(a.tiers, func(t []*route) bool { return len(t) > 1 }) {
		fmt.Fprintf(b, "    strategy: %s   # %s\n", s.strategy, s.strategyNote)
	}
	if s.retries >= 0 || s.deadline != "" {
		var parts []string
		if s.retries >= 0 {
			// LiteLLM's retries, then one attempt at least on each
			// fallback group.
			parts = append(parts, fmt.Sprintf("max_attempts: %d", s.retries+len(a.tiers)))
		}
		if s.deadline != "" {
			parts = append(parts, "deadline: "+s.deadline)
		}
		why := "LiteLLM's num_retries + 1"
		if len(a.tiers) > 1 {
			why += ", and one for each fallback group"
		}
		if s.deadline != "" {
			why += "; its timeout: the whole request's deadline"
		}
		fmt.Fprintf(b, "    retry: {%s}   # %s\n", strings.Join(parts, ", "), why)
	}
	if len(a.fam) > 1 {
		b.WriteString("    stream: {resume_routes: same}   # the routes are of different model families (" + strings.Join(a.fam, ", ") + "):\n")
		b.WriteString("    # a stream cut after output is continued only by the route that began it, never by\n")
		b.WriteString("    # another family's model; set resume_routes: any to allow that\n")
	}
	for _, n := range a.notes {
		writeComment(b, "    ", n)
	}
}

func writeComment(b *strings.Builder, indent, text string) {
	for _, l := range strings.Split(text, "\n") {
		fmt.Fprintf(b, "%s# %s\n", indent, l)
	}
}

var plainScalar = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.\-/@+]*$`)

// q writes s as a YAML scalar: plain when it reads back as the same
// string, else double-quoted (JSON's quoting, which YAML reads).
func q(s string) string {
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "null", "y", "n", "~":
		return strconv.Quote(s)
	}
	if plainScalar.MatchString(s) {
		return s
	}
	out, _ := json.Marshal(s)
	return string(out)
}

// num writes a price without float noise.
func num(f float64) string { return strconv.FormatFloat(f, 'g', 10, 64) }

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

// slug is s as an id: lower case, runs of other characters as one dash.
func slug(s string) string {
	out := strings.Trim(nonSlug.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if out == "" {
		return "x"
	}
	return out
}

func slugUnderscore(s string) string { return strings.ReplaceAll(slug(s), "-", "_") }
