package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/sse"
)

// runNaive plays the incident through the stack of seed 000: a shared
// provider client that retries and, when a stream breaks, fails over by
// starting a fresh generation on the other provider; an orchestrator that
// hands every (partial) answer to the app; a usage record per provider call;
// and a mobile client whose re-POST is a brand-new request.
func runNaive(ctx context.Context, w *world, say func(string, ...any)) outcome {
	var mu sync.Mutex
	var answers []string // what the app was handed, in order
	render := func(turn int, text string) {
		mu.Lock()
		defer mu.Unlock()
		for len(answers) <= turn {
			answers = append(answers, "")
		}
		answers[turn] += text
	}
	next := 0
	newTurn := func() int {
		mu.Lock()
		defer mu.Unlock()
		next++
		return next - 1
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); naiveGateway(ctx, w, say, "POST 1", render, newTurn) }()
	select { // the mobile client gives up; the pipeline behind it does not
	case <-time.After(clientTimeout):
	case <-ctx.Done():
	}
	say("POST 1: the client gave up after %v; it re-POSTs — a brand-new request to this stack", clientTimeout)
	wg.Add(1)
	go func() { defer wg.Done(); naiveGateway(ctx, w, say, "POST 2", render, newTurn) }()
	wg.Wait()
	ps, fs := w.primary.Stats(), w.fallback.Stats()
	o := outcome{upstreamCalls: ps.Requests + fs.Requests, generations: ps.Generations + fs.Generations,
		tokensBilled: ps.Billable() + fs.Billable(), usageRecords: int(ps.Requests + fs.Requests)}
	openings := map[string]bool{}
	for _, a := range answers {
		if a == "" {
			continue // a call that failed before any output
		}
		o.answersToApp++
		openings[a[:min(40, len(a))]] = true
	}
	o.userSaw = fmt.Sprintf("%d answers, %d openings: it restarted mid-answer", o.answersToApp, len(openings))
	return o
}

// naiveGateway is the shared client of seed 000: retry on any error
// (ignoring Retry-After), and on a broken stream fail over to the other
// provider with a fresh generation — from the start, onto what the user
// already read.
func naiveGateway(ctx context.Context, w *world, say func(string, ...any), who string, render func(int, string), newTurn func() int) {
	body := `{"model":"primary-llm","stream":true,"messages":[{"role":"user","content":` + fmt.Sprintf("%q", prompt()) + `}]}`
	for try := 1; try <= 3; try++ {
		turn := newTurn()
		n, complete, status, err := relay(ctx, w.primaryURL+"/v1/chat/completions", provider.OpenAI, body, func(s string) { render(turn, s) })
		switch {
		case status != 200 && status != 0:
			say("%s: primary answered %d; retrying at once", who, status)
			continue
		case complete:
			say("%s: primary streamed a full answer (%d tokens)", who, n)
			return
		}
		say("%s: primary's stream broke after %d tokens (%v); failing over: a fresh generation on the fallback", who, n, err)
		fb := `{"model":"fallback-llm","max_tokens":4096,"stream":true,"messages":[{"role":"user","content":` + fmt.Sprintf("%q", prompt()) + `}]}`
		turn = newTurn()
		n, _, _, _ = relay(ctx, w.fallbackURL+"/v1/messages", provider.Anthropic, fb, func(s string) { render(turn, s) })
		say("%s: the fallback streamed %d tokens, starting over with a different opening", who, n)
		return
	}
}

// relay streams one call and passes its text on; it reports the tokens
// seen and whether the stream finished.
func relay(ctx context.Context, url string, p provider.Protocol, body string, onText func(string)) (n int, complete bool, status int, err error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		_, _ = io.Copy(io.Discard, res.Body)
		return 0, false, res.StatusCode, nil
	}
	rd := sse.NewReader(res.Body, 1<<20)
	dec := provider.NewDecoder(p)
	var evs []provider.Event
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return n, complete, 200, err
		}
		evs, _ = dec.Decode(ev, evs[:0])
		for _, e := range evs {
			switch e.Kind {
			case provider.EvText:
				n++
				onText(e.Text)
			case provider.EvDone:
				complete = true
			}
		}
	}
}

// readText reads an OpenAI-protocol SSE body into its text.
func readText(r io.Reader) (string, error) {
	var b strings.Builder
	rd := sse.NewReader(r, 1<<20)
	dec := provider.NewDecoder(provider.OpenAI)
	var evs []provider.Event
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b.String(), nil
			}
			return b.String(), err
		}
		evs, _ = dec.Decode(ev, evs[:0])
		for _, e := range evs {
			if e.Kind == provider.EvText {
				b.WriteString(e.Text)
			}
		}
	}
}
