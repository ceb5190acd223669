package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/strictjson"
)

// The gateway's own endpoints — the admin API, the read APIs — read
// bodies alike in every package that serves one: strict JSON
// (docs/keys-and-teams.md); and they answer an error in the shape of the SDK that
// asked, whichever package serves them.

// ReadStrict decodes a JSON body into v: unknown fields, wrong types,
// members given twice and trailing data are 400s naming the field. maps
// are the paths of v's maps, whose keys may differ in case only
// (strictjson.Duplicates).
func ReadStrict(r *http.Request, v any, maps ...string) *Error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err != nil {
		return Errorf(CodeInvalidRequest, "could not read the request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	if err == nil {
		err = strictjson.Duplicates(body, maps...)
	}
	if err == nil {
		return nil
	}
	var de *strictjson.DuplicateError
	if errors.As(err, &de) {
		return &Error{Code: CodeInvalidRequest, Param: de.Path, Message: fmt.Sprintf("%s is given twice: each member may appear once", de.Path)}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &Error{Code: CodeInvalidRequest, Param: te.Field, Message: fmt.Sprintf("field %s: want %s, got a JSON %s", te.Field, te.Type, te.Value)}
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		f = strings.Trim(f, `"`)
		return &Error{Code: CodeInvalidRequest, Param: f, Message: fmt.Sprintf("unknown field %q", f)}
	}
	return Errorf(CodeInvalidRequest, "the request body is not a JSON object: %v", err)
}

// ProtocolOf picks the error shape for endpoints shared by both SDKs: the
// Anthropic SDK's when the request has its headers, else OpenAI's.
func ProtocolOf(r *http.Request) provider.Protocol {
	if r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != "" {
		return provider.Anthropic
	}
	return provider.OpenAI
}

// MethodNotAllowed answers a known path asked with another method: 405
// with Allow, in the caller's protocol.
func MethodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		Errorf(CodeMethodNotAllowed, "%s %s: use %s", r.Method, r.URL.Path, allow).Write(w, ProtocolOf(r), Meta{})
	}
}
