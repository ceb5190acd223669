package gemini

import (
	"bytes"
	"encoding/json"
	"sort"

	"github.com/oncegate/oncegate/internal/provider"
)

// Field is one client request field's fate on a Gemini route (Gemini API
// or Vertex AI with publisher google): the gemini column of the field
// table in docs/translation.md. Fields lists every field of
// provider.Fields; a field it does not list is native only.
type Field struct {
	Protocol provider.Protocol
	Name     string
	Fate     provider.Fate
	// Neutral reports whether a value asks for nothing Gemini lacks; nil:
	// only null does.
	Neutral func(json.RawMessage) bool
	// To is the Gemini member a translated value becomes.
	To   string
	Note string
	// Droppable: the alias (may_drop) or the request may let a Gemini
	// route serve the request without it.
	Droppable bool
}

func isJSON(want ...string) func(json.RawMessage) bool {
	return func(raw json.RawMessage) bool {
		raw = bytes.TrimSpace(raw)
		for _, w := range want {
			if string(raw) == w {
				return true
			}
		}
		return false
	}
}

// noParallelOptOut reports an Anthropic tool_choice that does not ask for
// disable_parallel_tool_use, which Gemini cannot honour.
func noParallelOptOut(raw json.RawMessage) bool {
	var v struct {
		Disable bool `json:"disable_parallel_tool_use"`
	}
	return json.Unmarshal(raw, &v) == nil && !v.Disable
}

func empty(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && len(m) == 0
}

// Fields is the gemini column of the field table.
var Fields = []Field{
	// OpenAI Chat Completions.
	{Protocol: provider.OpenAI, Name: "model", Fate: provider.FateGateway, Note: "the route's model, in the URL"},
	{Protocol: provider.OpenAI, Name: "stream", Fate: provider.FateGateway, Note: ":streamGenerateContent?alt=sse when the client streams"},
	{Protocol: provider.OpenAI, Name: "stream_options", Fate: provider.FateGateway, Note: "Gemini always reports usage"},
	{Protocol: provider.OpenAI, Name: "messages", Fate: provider.FateTranslated, To: "systemInstruction, contents", Note: "system and developer messages become systemInstruction; assistant is role model; tool results become functionResponse parts; images and audio must be inline"},
	{Protocol: provider.OpenAI, Name: "max_tokens", Fate: provider.FateTranslated, To: "generationConfig.maxOutputTokens"},
	{Protocol: provider.OpenAI, Name: "max_completion_tokens", Fate: provider.FateTranslated, To: "generationConfig.maxOutputTokens"},
	{Protocol: provider.OpenAI, Name: "temperature", Fate: provider.FateTranslated, To: "generationConfig.temperature", Note: "Gemini's range is 0–2, as OpenAI's"},
	{Protocol: provider.OpenAI, Name: "top_p", Fate: provider.FateTranslated, To: "generationConfig.topP"},
	{Protocol: provider.OpenAI, Name: "stop", Fate: provider.FateTranslated, To: "generationConfig.stopSequences"},
	{Protocol: provider.OpenAI, Name: "tools", Fate: provider.FateTranslated, To: "tools[].functionDeclarations", Note: "parameters travel unchanged as parametersJsonSchema"},
	{Protocol: provider.OpenAI, Name: "tool_choice", Fate: provider.FateTranslated, To: "toolConfig.functionCallingConfig", Note: "auto AUTO, none NONE, required ANY, a named function ANY with allowedFunctionNames"},
	{Protocol: provider.OpenAI, Name: "parallel_tool_calls", Fate: provider.FateNativeOnly, Neutral: isJSON("true"), Note: "Gemini cannot forbid parallel function calls: false keeps the request off Gemini routes"},
	{Protocol: provider.OpenAI, Name: "user", Fate: provider.FateNativeOnly, Droppable: true, Note: "Gemini has no end-user field"},
	{Protocol: provider.OpenAI, Name: "safety_identifier", Fate: provider.FateNativeOnly, Droppable: true, Note: "Gemini has no end-user field"},
	{Protocol: provider.OpenAI, Name: "n", Fate: provider.FateTranslated, To: "generationConfig.candidateCount", Note: "1 to 8 candidates, each a choice by its index, every one billed (candidatesTokenCount counts them all)"},
	{Protocol: provider.OpenAI, Name: "response_format", Fate: provider.FateTranslated, To: "generationConfig.responseMimeType, responseJsonSchema", Note: "json_object is application/json; json_schema adds its schema unchanged as responseJsonSchema"},
	{Protocol: provider.OpenAI, Name: "seed", Fate: provider.FateTranslated, To: "generationConfig.seed"},
	{Protocol: provider.OpenAI, Name: "frequency_penalty", Fate: provider.FateTranslated, To: "generationConfig.frequencyPenalty"},
	{Protocol: provider.OpenAI, Name: "presence_penalty", Fate: provider.FateTranslated, To: "generationConfig.presencePenalty"},
	{Protocol: provider.OpenAI, Name: "logprobs", Fate: provider.FateNativeOnly, Neutral: isJSON("false"), Note: "Gemini's logprobsResult is not translated"},
	{Protocol: provider.OpenAI, Name: "top_logprobs", Fate: provider.FateNativeOnly, Neutral: isJSON("0")},
	{Protocol: provider.OpenAI, Name: "reasoning_effort", Fate: provider.FateNativeOnly, Droppable: true, Note: "Gemini's thinkingConfig is not the same knob"},
	{Protocol: provider.OpenAI, Name: "metadata", Fate: provider.FateNativeOnly, Droppable: true, Neutral: empty},
	{Protocol: provider.OpenAI, Name: "store", Fate: provider.FateNativeOnly, Droppable: true, Neutral: isJSON("false")},
	{Protocol: provider.OpenAI, Name: "logit_bias", Fate: provider.FateNativeOnly, Droppable: true, Neutral: empty},
	{Protocol: provider.OpenAI, Name: "modalities", Fate: provider.FateNativeOnly, Neutral: isJSON(`["text"]`)},
	{Protocol: provider.OpenAI, Name: "audio", Fate: provider.FateNativeOnly},
	{Protocol: provider.OpenAI, Name: "prediction", Fate: provider.FateNativeOnly},
	{Protocol: provider.OpenAI, Name: "service_tier", Fate: provider.FateNativeOnly, Droppable: true, Neutral: isJSON(`"auto"`)},
	{Protocol: provider.OpenAI, Name: "prompt_cache_key", Fate: provider.FateNativeOnly, Droppable: true},
	{Protocol: provider.OpenAI, Name: "verbosity", Fate: provider.FateNativeOnly, Droppable: true},
	{Protocol: provider.OpenAI, Name: "web_search_options", Fate: provider.FateNativeOnly},
	{Protocol: provider.OpenAI, Name: "functions", Fate: provider.FateNativeOnly, Note: "deprecated; use tools"},
	{Protocol: provider.OpenAI, Name: "function_call", Fate: provider.FateNativeOnly, Note: "deprecated; use tool_choice"},

	// Anthropic Messages.
	{Protocol: provider.Anthropic, Name: "model", Fate: provider.FateGateway, Note: "the route's model, in the URL"},
	{Protocol: provider.Anthropic, Name: "stream", Fate: provider.FateGateway, Note: ":streamGenerateContent?alt=sse when the client streams"},
	{Protocol: provider.Anthropic, Name: "messages", Fate: provider.FateTranslated, To: "contents", Note: "assistant is role model; tool_result blocks become functionResponse parts; images and documents must be base64"},
	{Protocol: provider.Anthropic, Name: "system", Fate: provider.FateTranslated, To: "systemInstruction"},
	{Protocol: provider.Anthropic, Name: "max_tokens", Fate: provider.FateTranslated, To: "generationConfig.maxOutputTokens"},
	{Protocol: provider.Anthropic, Name: "temperature", Fate: provider.FateTranslated, To: "generationConfig.temperature"},
	{Protocol: provider.Anthropic, Name: "top_p", Fate: provider.FateTranslated, To: "generationConfig.topP"},
	{Protocol: provider.Anthropic, Name: "top_k", Fate: provider.FateTranslated, To: "generationConfig.topK"},
	{Protocol: provider.Anthropic, Name: "stop_sequences", Fate: provider.FateTranslated, To: "generationConfig.stopSequences"},
	{Protocol: provider.Anthropic, Name: "tools", Fate: provider.FateTranslated, To: "tools[].functionDeclarations", Note: "input_schema travels unchanged as parametersJsonSchema"},
	{Protocol: provider.Anthropic, Name: "tool_choice", Fate: provider.FateNativeOnly, Neutral: noParallelOptOut, To: "toolConfig.functionCallingConfig", Note: "auto AUTO, none NONE, any ANY, tool ANY with allowedFunctionNames; disable_parallel_tool_use keeps the request off Gemini routes"},
	{Protocol: provider.Anthropic, Name: "metadata", Fate: provider.FateNativeOnly, Droppable: true, Neutral: empty, Note: "Gemini has no end-user field"},
	{Protocol: provider.Anthropic, Name: "thinking", Fate: provider.FateNativeOnly, Neutral: func(raw json.RawMessage) bool {
		var v struct {
			Type string `json:"type"`
		}
		return json.Unmarshal(raw, &v) == nil && v.Type == "disabled"
	}, Note: "Gemini's thoughts are not Anthropic thinking blocks"},
	{Protocol: provider.Anthropic, Name: "service_tier", Fate: provider.FateNativeOnly, Droppable: true, Neutral: isJSON(`"auto"`)},
	{Protocol: provider.Anthropic, Name: "container", Fate: provider.FateNativeOnly},
	{Protocol: provider.Anthropic, Name: "mcp_servers", Fate: provider.FateNativeOnly},
	{Protocol: provider.Anthropic, Name: "context_management", Fate: provider.FateNativeOnly},
}

var fieldIndex = func() map[provider.Protocol]map[string]*Field {
	m := map[provider.Protocol]map[string]*Field{provider.OpenAI: {}, provider.Anthropic: {}}
	for i := range Fields {
		m[Fields[i].Protocol][Fields[i].Name] = &Fields[i]
	}
	return m
}()

// FateOf is what value of field name of protocol p becomes on a Gemini
// route.
func FateOf(p provider.Protocol, name string, value json.RawMessage) provider.Fate {
	f := fieldIndex[p][name]
	if f == nil {
		return provider.FateNativeOnly
	}
	if string(bytes.TrimSpace(value)) == "null" || f.Neutral != nil && f.Neutral(value) {
		if f.Fate == provider.FateGateway {
			return f.Fate
		}
		return provider.FateTranslated
	}
	return f.Fate
}

// Droppable reports whether field name of protocol p may be dropped for a
// Gemini route (Field.Droppable).
func Droppable(p provider.Protocol, name string) bool {
	f := fieldIndex[p][name]
	return f != nil && f.Droppable
}

// NativeOnly lists, sorted, the top-level fields of a client body of
// protocol p that a Gemini route cannot carry: such a route is ineligible
// for the request (unless every one of them may be dropped).
func NativeOnly(p provider.Protocol, body []byte) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return nil
	}
	var out []string
	for name, v := range top {
		if FateOf(p, name, v) == provider.FateNativeOnly {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
