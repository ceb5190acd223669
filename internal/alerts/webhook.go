package alerts

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// SignatureHeader carries an event body's signature: "sha256=" and the
// hex HMAC-SHA256 of the body keyed by the webhook's secret.
const SignatureHeader = "X-Oncegate-Signature"

// Sign is the value of SignatureHeader for body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig is Sign(secret, body), in constant time.
func Verify(secret, body []byte, sig string) bool {
	return hmac.Equal([]byte(sig), []byte(Sign(secret, body)))
}

// Counter counts what became of each event: "sent", "failed" (every try
// failed) or "dropped" (the queue was full) (metrics.Metrics).
type Counter interface {
	ObserveBudgetAlert(result string)
}

// Webhook posts events to a URL from a bounded queue, in its own
// goroutine (Run): a failed post (an error, or a status other than 2xx)
// is tried again after a backoff that doubles, up to Tries tries. Send
// never blocks; when the queue is full the event is dropped, counted and
// logged. Safe for concurrent use once made by NewWebhook.
type Webhook struct {
	url     string
	secret  []byte
	client  *http.Client
	log     *slog.Logger
	count   Counter
	queue   chan Event
	tries   int
	backoff time.Duration
}

// WebhookConfig configures a Webhook; zero fields take their defaults.
type WebhookConfig struct {
	URL    string
	Secret []byte
	// Client posts the events (default: a client with a 10 s timeout).
	Client *http.Client
	Log    *slog.Logger
	Count  Counter
	// Queue bounds the events waiting to be sent (default 256).
	Queue int
	// Tries bounds the posts of one event (default 5).
	Tries int
	// Backoff is the wait after the first failed try, doubled after each
	// (default 1 s: 1, 2, 4, 8 s).
	Backoff time.Duration
}

// NewWebhook returns a webhook; Run sends what Send queues.
func NewWebhook(c WebhookConfig) *Webhook {
	h := &Webhook{url: c.URL, secret: c.Secret, client: c.Client, log: c.Log, count: c.Count,
		queue: make(chan Event, max(1, c.Queue)), tries: c.Tries, backoff: c.Backoff}
	if c.Queue <= 0 {
		h.queue = make(chan Event, 256)
	}
	if h.client == nil {
		h.client = &http.Client{Timeout: 10 * time.Second}
	}
	if h.tries <= 0 {
		h.tries = 5
	}
	if h.backoff <= 0 {
		h.backoff = time.Second
	}
	return h
}

// Send queues ev; when the queue is full it is dropped (counted and
// logged).
func (h *Webhook) Send(ev Event) {
	select {
	case h.queue <- ev:
	default:
		h.count.ObserveBudgetAlert("dropped")
		h.log.Error("budget alert dropped: the webhook's queue is full", "scope", ev.Scope, "id", ev.Subject,
			"period", ev.Period, "threshold", ev.Threshold, "queue", cap(h.queue))
	}
}

// Run sends the queued events, one at a time, until ctx ends.
func (h *Webhook) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-h.queue:
			h.deliver(ctx, ev)
		}
	}
}

// deliver posts ev until it is accepted or its tries are spent.
func (h *Webhook) deliver(ctx context.Context, ev Event) {
	body, err := json.Marshal(ev)
	if err != nil { // strings, numbers and a time: cannot fail
		return
	}
	wait := h.backoff
	for try := 1; ; try++ {
		err := h.post(ctx, body, ev.ID)
		if err == nil {
			h.count.ObserveBudgetAlert("sent")
			return
		}
		if try == h.tries || ctx.Err() != nil {
			h.count.ObserveBudgetAlert("failed")
			h.log.Error("budget alert not delivered", "id", ev.ID, "scope", ev.Scope, "subject", ev.Subject,
				"period", ev.Period, "threshold", ev.Threshold, "tries", try, "err", err)
			return
		}
		h.log.Warn("budget alert refused; trying again", "id", ev.ID, "try", try, "after", wait.String(), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		wait *= 2
	}
}

// post sends body once.
func (h *Webhook) post(ctx context.Context, body []byte, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("budget webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(h.secret, body))
	req.Header.Set("X-Oncegate-Event-Id", id)
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("post the budget alert: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the budget webhook answered %s", resp.Status)
	}
	return nil
}

// eventID names a crossing by its key.
func eventID(key string) string {
	s := sha256.Sum256([]byte(key))
	return "bae_" + hex.EncodeToString(s[:12])
}
