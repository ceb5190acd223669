package mock

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
)

// embeddingsDims is the length of the mock's vectors unless a request
// asks for dimensions.
const embeddingsDims = 8

// rsEmbed is an embeddings request being answered.
type rsEmbed struct {
	inputs []string
	dims   int
	base64 bool
}

// serveEmbeddings answers POST /v1/embeddings as OpenAI does: one unit
// vector per input, deterministic from its text, as floats or base64
// float32s. The script's faults apply as to any call.
func (m *Mock) serveEmbeddings(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	model, e, prompt, msg := parseEmbeddings(body, false)
	if msg != "" {
		oaError(w, 400, "invalid_request_error", "", msg)
		return
	}
	x := m.begin(oaCodec{}, w, r, &ask{model: model, promptTokens: prompt})
	x.emb = e
	x.finishServe()
}

// parseEmbeddings reads an embeddings request (the model may be left out
// when the URL names it); msg is the message of a 400.
func parseEmbeddings(body []byte, modelInURL bool) (model string, e *rsEmbed, prompt int64, msg string) {
	var in struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
		Dimensions     int             `json:"dimensions"`
	}
	if err := json.Unmarshal(body, &in); err != nil || (in.Model == "" && !modelInURL) {
		return "", nil, 0, "invalid embeddings request"
	}
	e = &rsEmbed{dims: embeddingsDims, base64: in.EncodingFormat == "base64"}
	if in.Dimensions > 0 {
		e.dims = in.Dimensions
	}
	var one string
	if json.Unmarshal(in.Input, &one) == nil {
		e.inputs = []string{one}
	} else {
		var list []json.RawMessage
		_ = json.Unmarshal(in.Input, &list)
		for _, item := range list {
			if json.Unmarshal(item, &one) != nil {
				one = string(item) // token ids: their JSON text
			}
			e.inputs = append(e.inputs, one)
		}
	}
	if len(e.inputs) == 0 {
		return "", nil, 0, "'input' must not be empty"
	}
	for _, s := range e.inputs {
		prompt += textTokens(s)
	}
	return in.Model, e, prompt, ""
}

// embed writes the embeddings answer.
func (x *exchange) embed() {
	data := make([]map[string]any, len(x.emb.inputs))
	for i, s := range x.emb.inputs {
		v := Embedding(s, x.emb.dims)
		var out any = v
		if x.emb.base64 {
			b := make([]byte, 4*len(v))
			for j, f := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(float32(f)))
			}
			out = base64.StdEncoding.EncodeToString(b)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": out}
	}
	x.w.Header().Set("Content-Type", "application/json")
	x.w.Header().Set("x-request-id", "req_mock"+x.id)
	_ = json.NewEncoder(x.w).Encode(map[string]any{"object": "list", "data": data, "model": x.req.model,
		"usage": map[string]int64{"prompt_tokens": x.prompt, "total_tokens": x.prompt}})
}

// Embedding is the mock's vector for a text: unit length, deterministic.
func Embedding(text string, dims int) []float64 {
	v := make([]float64, dims)
	var norm float64
	for i := range v {
		h := sha256.Sum256([]byte(strconv.Itoa(i) + "\x00" + text))
		v[i] = float64(int64(binary.BigEndian.Uint64(h[:8])>>11))/float64(1<<52) - 1
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] /= norm
	}
	return v
}

// countTokens answers POST /v1/messages/count_tokens as Anthropic does:
// the shared estimator's count plus CountOverhead (a provider's tokenizer
// is not the gateway's estimate). A lookup, not a generation.
func (m *Mock) countTokens(w http.ResponseWriter, r *http.Request) {
	m.lookup()
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	a, in, err := decodeAnthropicPrompt(body, false)
	if err == nil && in.Model == "" {
		err = refusal("model: Field required")
	}
	if err != nil {
		anError(w, 400, "invalid_request_error", err.Error())
		return
	}
	if f := m.countFault(in.Model, r.Header.Get("Idempotency-Key")); f != nil {
		x := &exchange{m: m, c: anCodec{}, w: w, r: r}
		switch f.Type {
		case FaultStatus:
			x.c.fail(x, f)
			return
		case FaultReset:
			reset(w)
			return
		case FaultHang:
			x.block(nil)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int64{"input_tokens": a.promptTokens + CountOverhead})
}

// countFault is the fault of the first count_tokens rule matching a
// count of model's, numbered apart from its generations.
func (m *Mock) countFault(model, key string) *Fault {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[model]++
	c := call{model: model, key: key, n: m.counts[model], since: time.Since(m.setAt), countTokens: true}
	for i := range m.script.Rules {
		if m.script.Rules[i].matches(c, i) {
			f := m.script.Rules[i].Fault
			return &f
		}
	}
	return nil
}

// CountOverhead is what the mock's token count adds to the estimate.
const CountOverhead = 3
