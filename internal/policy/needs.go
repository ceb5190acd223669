package policy

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// nativeOnly lists the request's fields route r cannot carry: by its
// type's own field table when it has one and NativeOnlyOn is set, else
// every native-only field when r speaks another protocol than the
// client.
func (n *Needs) nativeOnly(r *Route) []string {
	if ft, ok := r.Provider.Impl.(provider.FieldTable); ok && n.NativeOnlyOn != nil {
		return n.NativeOnlyOn(ft)
	}
	if string(r.Provider.Impl.Spec().Protocol) != n.Protocol {
		return n.NativeOnly
	}
	return nil
}

// Needs is what one request requires of a route, found by inspecting it
// before the first dispatch.
type Needs struct {
	Images        bool
	Audio         bool
	Tools         bool
	JSONSchema    bool
	Stream        bool
	ContextTokens int64 // prompt estimate plus requested output
	// Protocol is the client's ("openai", "anthropic"); NativeOnly the
	// request's fields that only a route speaking it can serve.
	Protocol   string
	NativeOnly []string
	// NativeOnlyOn, when set, lists the request's fields a route of a
	// type with its own field table (provider.FieldTable) cannot carry
	// and may not drop; such a route is ineligible when it lists any.
	NativeOnlyOn func(provider.FieldTable) []string
	// Embeddings: the request is for embeddings, which only OpenAI-type
	// routes serve.
	Embeddings bool
	// Uncarried, when set, lists the request's fields that a route of
	// type t cannot carry although the other protocol could
	// (provider.FieldLimiter); nil or empty: none.
	Uncarried func(t provider.Type) []string
	// BoundaryOf names whose limit the data boundary Ineligible is given
	// is, as a reason says it ("virtual key key_1's"); empty: the
	// tenant's.
	BoundaryOf string
}

// Ineligible returns, for each of the alias's routes that cannot serve a
// request with these needs for a tenant allowed up to maxBoundary, the
// reason why (docs/configuration.md). Such routes are skipped, never tried. A request
// whose context exceeds every route is still sent to the largest-context
// routes: the provider's context_length_exceeded is authoritative, because
// the gateway's token count is an estimate.
func (a *Alias) Ineligible(n Needs, maxBoundary gw.DataBoundary) map[string]string {
	out := map[string]string{}
	var largest int64
	for _, r := range a.Routes {
		largest = max(largest, r.Caps.MaxContextTokens)
	}
	for _, r := range a.Routes {
		switch {
		case r.Boundary > maxBoundary:
			out[r.ID] = fmt.Sprintf("data boundary %s exceeds %s %s", r.Boundary, cmp.Or(n.BoundaryOf, "the tenant's"), maxBoundary)
		case n.Embeddings && !r.Provider.Impl.Spec().Embeddings:
			out[r.ID] = fmt.Sprintf("embeddings need a provider that serves them, not %s", r.Provider.Type)
		case len(n.nativeOnly(r)) > 0:
			out[r.ID] = fmt.Sprintf("%s cannot be carried to the %s protocol", strings.Join(n.nativeOnly(r), ", "), r.Provider.Impl.Spec().Protocol)
		case n.Uncarried != nil && len(n.Uncarried(r.Provider.Impl)) > 0:
			out[r.ID] = fmt.Sprintf("%s cannot be carried to a %s route", strings.Join(n.Uncarried(r.Provider.Impl), ", "), r.Provider.Type)
		case n.Images && !r.Caps.Accepts(InputImage):
			out[r.ID] = "no image input"
		case n.Audio && !r.Caps.Accepts(InputAudio):
			out[r.ID] = "no audio input"
		case n.Tools && !r.Caps.Tools:
			out[r.ID] = "no tool support"
		case n.JSONSchema && !r.Caps.JSONSchema:
			out[r.ID] = "no json_schema support"
		case n.Stream && !r.Caps.Streaming:
			out[r.ID] = "no streaming"
		case n.ContextTokens > r.Caps.MaxContextTokens && r.Caps.MaxContextTokens < largest:
			out[r.ID] = fmt.Sprintf("context %d tokens exceeds max_context_tokens %d", n.ContextTokens, r.Caps.MaxContextTokens)
		}
	}
	return out
}
