package mock

import "sync"

// Counter counts what one key (idempotency key, request id, model) cost.
type Counter struct {
	Requests      int64 `json:"requests"`
	Generations   int64 `json:"generations"`
	Continuations int64 `json:"continuations"`
	InputTokens   int64 `json:"input_tokens"`
	OutputTokens  int64 `json:"output_tokens"`
	Disconnects   int64 `json:"disconnects"`
	// MaxTokensAsked is the largest output limit (max_tokens,
	// max_completion_tokens) a request asked for; Unlimited counts the
	// requests that set none.
	MaxTokensAsked int64 `json:"max_tokens_asked"`
	Unlimited      int64 `json:"unlimited"`
}

// Billable is input plus output tokens.
func (c Counter) Billable() int64 { return c.InputTokens + c.OutputTokens }

// Stats is the mock's ground truth, served at GET /mock/stats.
type Stats struct {
	Counter
	ByIdempotencyKey map[string]Counter `json:"by_idempotency_key"`
	ByRequestID      map[string]Counter `json:"by_request_id"`
	ByModel          map[string]Counter `json:"by_model"`
}

// stats accumulates counters; safe for concurrent use.
type stats struct {
	mu    sync.Mutex
	total Counter
	key   map[string]*Counter
	reqID map[string]*Counter
	model map[string]*Counter
}

func newStats() *stats {
	return &stats{key: map[string]*Counter{}, reqID: map[string]*Counter{}, model: map[string]*Counter{}}
}

// labels is the set of keys one request is counted under.
type labels struct{ key, reqID, model string }

func (s *stats) add(l labels, f func(*Counter)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.total)
	for _, kv := range []struct {
		m map[string]*Counter
		k string
	}{{s.key, l.key}, {s.reqID, l.reqID}, {s.model, l.model}} {
		if kv.k == "" {
			continue
		}
		c := kv.m[kv.k]
		if c == nil {
			c = &Counter{}
			kv.m[kv.k] = c
		}
		f(c)
	}
}

func (s *stats) snapshot() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	copyMap := func(m map[string]*Counter) map[string]Counter {
		out := make(map[string]Counter, len(m))
		for k, v := range m {
			out[k] = *v
		}
		return out
	}
	return Stats{Counter: s.total, ByIdempotencyKey: copyMap(s.key), ByRequestID: copyMap(s.reqID), ByModel: copyMap(s.model)}
}
