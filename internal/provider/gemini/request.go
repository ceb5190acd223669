package gemini

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/oncegate/oncegate/internal/provider"
)

// SkipSignature is the thought signature Google documents for a model
// turn whose real signature is not at hand (a conversation that began on
// another provider, or a client that does not keep signatures): Gemini 3
// models answer 400 to a function call in history without one
// (docs/providers.md, "gemini").
const SkipSignature = "skip_thought_signature_validator"

// Extra is what a client request asks for beyond the neutral Request:
// values the Gemini API can carry that Chat Completions or Messages name
// in fields the neutral form does not keep.
type Extra struct {
	Seed             *int64
	TopK             *float64
	PresencePenalty  *float64
	FrequencyPenalty *float64
	// MimeType and Schema come from OpenAI's response_format: json_object
	// is application/json, json_schema adds its schema.
	MimeType string
	Schema   json.RawMessage
}

// extraOf reads the Extra fields of a client body of protocol p. The body
// has already been parsed by provider.ParseRequest, so it is valid JSON.
func extraOf(p provider.Protocol, body []byte) (Extra, error) {
	var x Extra
	var top struct {
		Seed             *int64   `json:"seed"`
		TopK             *float64 `json:"top_k"`
		PresencePenalty  *float64 `json:"presence_penalty"`
		FrequencyPenalty *float64 `json:"frequency_penalty"`
		ResponseFormat   *struct {
			Type       string `json:"type"`
			JSONSchema *struct {
				Schema json.RawMessage `json:"schema"`
			} `json:"json_schema"`
		} `json:"response_format"`
	}
	if err := json.Unmarshal(body, &top); err != nil {
		return x, &provider.InvalidRequestError{Message: "request body: " + err.Error()}
	}
	switch p {
	case provider.OpenAI:
		x.Seed, x.PresencePenalty, x.FrequencyPenalty = top.Seed, top.PresencePenalty, top.FrequencyPenalty
		if rf := top.ResponseFormat; rf != nil {
			switch rf.Type {
			case "json_object":
				x.MimeType = "application/json"
			case "json_schema":
				if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 || string(rf.JSONSchema.Schema) == "null" {
					return x, &provider.InvalidRequestError{Param: "response_format.json_schema.schema", Message: "a json_schema response format needs a schema"}
				}
				x.MimeType, x.Schema = "application/json", rf.JSONSchema.Schema
			}
		}
	case provider.Anthropic:
		x.TopK = top.TopK
	}
	return x, nil
}

// BuildRequest writes the generateContent body for one attempt of a
// client request on a Gemini model (Gemini API or Vertex AI). Every field
// the client sent is either carried here or makes the route ineligible
// beforehand (NativeOnly); what cannot be written is refused by name with
// a *provider.InvalidRequestError. A continuation prefix is refused:
// Gemini has no documented way to continue an answer (Continuations).
// in is never modified.
func BuildRequest(in *provider.ClientRequest, t provider.Target, prefix *string) ([]byte, error) {
	if prefix != nil {
		return nil, fmt.Errorf("gemini: a Gemini model cannot continue a partial answer")
	}
	if in.IR == nil {
		return nil, fmt.Errorf("gemini: the request has no neutral form")
	}
	x, err := extraOf(in.Protocol, in.Body)
	if err != nil {
		return nil, err
	}
	return Build(in.IR, x, t)
}

// Build writes a neutral request and its extras as a generateContent
// body for target t (t.MaxTokens, when set, is the output limit sent).
func Build(r *provider.Request, x Extra, t provider.Target) ([]byte, error) {
	out := genRequest{}
	if r.System != "" {
		out.SystemInstruction = &content{Parts: []part{{Text: r.System}}}
	}
	contents, err := contentsOf(r.Messages)
	if err != nil {
		return nil, err
	}
	out.Contents = contents
	if len(r.Tools) > 0 {
		decls := make([]functionDeclaration, len(r.Tools))
		for i, tl := range r.Tools {
			decls[i] = functionDeclaration{Name: tl.Name, Description: tl.Description}
			if s := bytes.TrimSpace(tl.Parameters); len(s) > 0 && string(s) != "null" {
				decls[i].ParametersJSONSchema = tl.Parameters
			}
		}
		out.Tools = []tool{{FunctionDeclarations: decls}}
	}
	if tc := r.ToolChoice; tc != nil {
		cfg := functionCallingConfig{}
		switch tc.Mode {
		case provider.ToolAuto:
			cfg.Mode = "AUTO"
		case provider.ToolNone:
			cfg.Mode = "NONE"
		case provider.ToolRequired:
			cfg.Mode = "ANY"
		case provider.ToolNamed:
			cfg.Mode, cfg.AllowedFunctionNames = "ANY", []string{tc.Name}
		default:
			return nil, &provider.InvalidRequestError{Param: "tool_choice", Message: "unknown tool choice " + strconv.Quote(tc.Mode)}
		}
		if len(r.Tools) > 0 || cfg.Mode == "NONE" {
			out.ToolConfig = &toolConfig{FunctionCallingConfig: cfg}
		}
	}
	if p := r.ParallelToolCalls; p != nil && !*p && len(r.Tools) > 0 {
		// NativeOnly keeps such a request off Gemini routes; a caller that
		// builds it anyway gets the refusal by name.
		return nil, &provider.InvalidRequestError{Param: "parallel_tool_calls", Message: "Gemini cannot forbid parallel function calls"}
	}
	gc := generationConfig{StopSequences: r.Stop, Temperature: r.Temperature, TopP: r.TopP, TopK: x.TopK, Seed: x.Seed,
		PresencePenalty: x.PresencePenalty, FrequencyPenalty: x.FrequencyPenalty, ResponseMimeType: x.MimeType}
	if len(x.Schema) > 0 {
		gc.ResponseJSONSchema = x.Schema
	}
	if r.Choices > 1 {
		// OpenAI's n: as many candidates, each a choice by its index
		// (docs/providers.md, "gemini").
		gc.CandidateCount = r.Choices
	}
	gc.MaxOutputTokens = r.MaxTokens
	if t.MaxTokens > 0 {
		gc.MaxOutputTokens = t.MaxTokens
	}
	if gc.MaxOutputTokens <= 0 {
		gc.MaxOutputTokens = t.MaxOutputTokens
	}
	out.GenerationConfig = &gc
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("gemini: encode request: %w", err)
	}
	return b, nil
}

// contentsOf writes neutral messages as Gemini contents. Roles become
// user and model; a tool result becomes a functionResponse part of a user
// turn, named after the call it answers; consecutive turns of one role
// merge, so parallel calls' responses travel together as the API asks.
func contentsOf(msgs []provider.Message) ([]content, error) {
	names := map[string]string{} // tool call id → function name
	var out []content
	add := func(role string, parts []part) {
		if len(parts) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Parts = append(out[n-1].Parts, parts...)
			return
		}
		out = append(out, content{Role: role, Parts: parts})
	}
	for i, m := range msgs {
		param := "messages[" + strconv.Itoa(i) + "]"
		switch m.Role {
		case provider.RoleUser:
			parts, err := partsOf(m.Parts, param)
			if err != nil {
				return nil, err
			}
			add("user", parts)
		case provider.RoleAssistant:
			parts, err := partsOf(m.Parts, param)
			if err != nil {
				return nil, err
			}
			for j, c := range m.ToolCalls {
				args := json.RawMessage(strings.TrimSpace(c.Arguments))
				if len(args) == 0 {
					args = json.RawMessage("{}")
				}
				if !json.Valid(args) || args[0] != '{' {
					return nil, &provider.InvalidRequestError{Param: fmt.Sprintf("%s.tool_calls[%d].function.arguments", param, j),
						Message: "Gemini takes a function call's arguments as a JSON object"}
				}
				p := part{FunctionCall: &functionCall{Name: c.Name, Args: args}}
				if j == 0 {
					p.ThoughtSignature = SkipSignature
				}
				parts = append(parts, p)
				names[c.ID] = c.Name
			}
			add("model", parts)
		case provider.RoleTool:
			name, ok := names[m.ToolCallID]
			if !ok {
				return nil, &provider.InvalidRequestError{Param: param + ".tool_call_id",
					Message: "a tool result must answer a tool call of an earlier assistant message (Gemini names a function response by its call)"}
			}
			add("user", []part{{FunctionResponse: &functionResponse{Name: name, Response: toolResult(m)}}})
		default:
			return nil, &provider.InvalidRequestError{Param: param + ".role", Message: "unknown role " + strconv.Quote(m.Role)}
		}
	}
	if len(out) == 0 {
		return nil, &provider.InvalidRequestError{Param: "messages", Message: "Gemini needs at least one message with content"}
	}
	return out, nil
}

// toolResult is a functionResponse's response object: a result that is
// itself a JSON object is sent as it is; other text goes under "output",
// or "error" for a failed call, the keys the API documents.
func toolResult(m provider.Message) json.RawMessage {
	text := m.Text()
	if t := strings.TrimSpace(text); !m.IsError && strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	key := "output"
	if m.IsError {
		key = "error"
	}
	b, _ := json.Marshal(map[string]string{key: text})
	return b
}

// partsOf writes a message's content parts. Images and other media must
// be inline (base64 or a data: URL): Gemini does not fetch http URLs.
func partsOf(ps []provider.Part, param string) ([]part, error) {
	var out []part
	for j, p := range ps {
		pparam := fmt.Sprintf("%s.content[%d]", param, j)
		switch p.Type {
		case provider.PartText:
			if p.Text != "" {
				out = append(out, part{Text: p.Text})
			}
		case provider.PartImage:
			if p.Data == "" || p.MediaType == "" {
				return nil, &provider.InvalidRequestError{Param: pparam,
					Message: "Gemini routes take images inline (base64 or a data: URL), not by URL"}
			}
			out = append(out, part{InlineData: &blob{MimeType: p.MediaType, Data: p.Data}})
		case provider.PartAudio:
			b, err := mediaOf(p.Raw, pparam)
			if err != nil {
				return nil, err
			}
			out = append(out, part{InlineData: b})
		default:
			return nil, &provider.InvalidRequestError{Param: pparam, Message: "unsupported content part " + strconv.Quote(p.Type)}
		}
	}
	return out, nil
}

// mediaOf reads a non-image media part from its original wire form:
// OpenAI's input_audio {data, format} and file {file_data: data URL},
// Anthropic's document with a base64 source.
func mediaOf(raw json.RawMessage, param string) (*blob, error) {
	var v struct {
		Type       string `json:"type"`
		InputAudio *struct {
			Data   string `json:"data"`
			Format string `json:"format"`
		} `json:"input_audio"`
		File *struct {
			FileData string `json:"file_data"`
		} `json:"file"`
		Source *struct {
			Type      string `json:"type"`
			MediaType string `json:"media_type"`
			Data      string `json:"data"`
		} `json:"source"`
	}
	if json.Unmarshal(raw, &v) == nil {
		switch {
		case v.InputAudio != nil && v.InputAudio.Data != "" && v.InputAudio.Format != "":
			return &blob{MimeType: "audio/" + v.InputAudio.Format, Data: v.InputAudio.Data}, nil
		case v.File != nil && v.File.FileData != "":
			if mt, data, ok := dataURL(v.File.FileData); ok {
				return &blob{MimeType: mt, Data: data}, nil
			}
		case v.Source != nil && v.Source.Type == "base64" && v.Source.MediaType != "" && v.Source.Data != "":
			return &blob{MimeType: v.Source.MediaType, Data: v.Source.Data}, nil
		}
	}
	return nil, &provider.InvalidRequestError{Param: param,
		Message: "Gemini routes take media inline (base64 with its media type); file ids, URLs and text documents are not carried"}
}

// dataURL splits a base64 data: URL.
func dataURL(u string) (mediaType, data string, ok bool) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", "", false
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok || !strings.HasSuffix(meta, ";base64") {
		return "", "", false
	}
	if _, err := base64.StdEncoding.DecodeString(data); err != nil {
		return "", "", false
	}
	return strings.TrimSuffix(meta, ";base64"), data, true
}
