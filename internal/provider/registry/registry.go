// Package registry is the table of provider types (docs/providers.md): the
// one place that knows which types exist. A configuration's `type` is
// looked up here; the gateway, the policy and the receipts only ever hold
// the provider.Type they got back. Adding a type is one package under
// internal/provider and one line in types.
package registry

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/provider/anthropic"
	"github.com/oncegate/oncegate/internal/provider/azure"
	"github.com/oncegate/oncegate/internal/provider/bedrock"
	"github.com/oncegate/oncegate/internal/provider/gemini"
	"github.com/oncegate/oncegate/internal/provider/openai"
	"github.com/oncegate/oncegate/internal/provider/vertex"
)

// types maps a configuration's `type` to its implementation.
var types = map[string]provider.Type{
	"openai":           openai.Chat,
	"openai-responses": openai.Responses,
	"anthropic":        anthropic.Messages,
	"azure-openai":     azure.OpenAI,
	"bedrock":          bedrock.Converse,
	"gemini":           gemini.API,
	"vertex":           vertex.AI,
}

// Lookup returns the type named name.
func Lookup(name string) (provider.Type, bool) {
	t, ok := types[name]
	return t, ok
}

// Names lists the known types, sorted.
func Names() []string {
	out := make([]string, 0, len(types))
	for n := range types {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// common are the keys every provider may set, whatever its type.
var common = []string{"id", "type", "timeouts", "headers", "query"}

// Keys lists every configuration key a provider of any type may set
// beyond the common ones (id, type, timeouts, headers, query): the yaml
// names of config.Provider.
func Keys() []string {
	var out []string
	t := reflect.TypeFor[config.Provider]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && !slices.Contains(common, name) {
			out = append(out, name)
		}
	}
	return out
}

// Alternatives splits a Spec.Required entry into the keys any one of
// which satisfies it ("api_key_env|api_key_file").
func Alternatives(required string) []string { return strings.Split(required, "|") }

// Open opens the provider cfg describes: cfg.Provider with its key (read
// from api_key_env or api_key_file; "" when none) and the environment.
// KeySource is filled in.
func Open(cfg provider.Config) (provider.Endpoint, error) {
	p := cfg.Provider
	t, ok := Lookup(p.Type)
	if !ok {
		return nil, fmt.Errorf("unknown provider type %q", p.Type)
	}
	cfg.KeySource = keySource(p)
	return t.Open(cfg)
}

// keySource names where a provider's key comes from, for messages.
func keySource(p *config.Provider) string {
	switch {
	case p.APIKeyEnv != "":
		return p.APIKeyEnv
	case p.APIKeyFile != "":
		return "file " + p.APIKeyFile
	case p.CredentialsFileEnv != "":
		return p.CredentialsFileEnv
	}
	return ""
}
