package provider

import (
	"encoding/json"
	"fmt"
	"strings"
)

// InvalidRequestError is a client request the gateway rejects itself
// (400 invalid_request): Param names the offending field.
type InvalidRequestError struct {
	Param   string
	Message string
}

func (e *InvalidRequestError) Error() string {
	if e.Param == "" {
		return e.Message
	}
	return e.Param + ": " + e.Message
}

func invalid(param, format string, args ...any) error {
	return &InvalidRequestError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// ClientError is an error the gateway returns to a client (docs/errors.md),
// rendered in the client's protocol with the "oncegate" block.
type ClientError struct {
	Status  int
	Type    string
	Code    string
	Message string
	Param   string
	// Oncegate block.
	RequestID string
	Attempts  int
	Terminal  string
	Reason    string
	// EmittedTokens is set for in-band stream errors.
	EmittedTokens int64
}

type oncegateBlock struct {
	RequestID string `json:"request_id"`
	Attempts  int    `json:"attempts"`
	Terminal  string `json:"terminal,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// EncodeError renders e as the client's protocol expects an error body:
// OpenAI {"error":{message,type,code,param}} or Anthropic
// {"type":"error","error":{type,message}}, plus "oncegate".
func EncodeError(p Protocol, e *ClientError) []byte {
	og := oncegateBlock{RequestID: e.RequestID, Attempts: e.Attempts, Terminal: e.Terminal, Reason: e.Reason}
	var v any
	if p == Anthropic {
		typ := e.Type
		if typ == "" {
			typ = e.Code
		}
		msg := e.Message
		if e.Param != "" && !strings.Contains(msg, e.Param) {
			msg = e.Param + ": " + msg // the Anthropic shape has no param field
		}
		v = struct {
			Type     string        `json:"type"`
			Error    anthropicErr  `json:"error"`
			Oncegate oncegateBlock `json:"oncegate"`
		}{"error", anthropicErr{Type: typ, Message: msg, Code: e.Code}, og}
	} else {
		var param *string
		if e.Param != "" {
			param = &e.Param
		}
		v = struct {
			Error    openaiErr     `json:"error"`
			Oncegate oncegateBlock `json:"oncegate"`
		}{openaiErr{Message: e.Message, Type: e.Type, Code: e.Code, Param: param}, og}
	}
	b, _ := json.Marshal(v) // plain structs of strings: cannot fail
	return b
}

type openaiErr struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Param   *string `json:"param"`
}

type anthropicErr struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
}

// StreamErrorData is the in-band error that ends an interrupted stream
// (docs/streaming.md "stop"): OpenAI clients get it as a data event, Anthropic
// clients as "event: error".
func StreamErrorData(p Protocol, e *ClientError) []byte {
	body := map[string]any{"type": e.Type, "code": e.Code, "message": e.Message,
		"emitted_tokens": e.EmittedTokens, "request_id": e.RequestID}
	if e.Terminal != "" {
		body["terminal"], body["reason"] = e.Terminal, e.Reason
	}
	var v any = map[string]any{"error": body}
	if p == Anthropic {
		v = map[string]any{"type": "error", "error": body}
	}
	b, _ := json.Marshal(v)
	return b
}
