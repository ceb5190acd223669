package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
)

// Benchmarks of the hot paths, each beside the same request sent straight
// to the mock (the direct path), over real loopback HTTP.

func benchPost(b *testing.B, client *http.Client, url, body string, auth bool) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth {
		req.Header.Set("Authorization", "Bearer "+keyAcme)
	}
	res, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, bufio.NewReader(res.Body)); err != nil {
		b.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != 200 {
		b.Fatalf("status %d", res.StatusCode)
	}
}

func benchEnv(b *testing.B) (*env, *http.Client, string) {
	return benchEnvWith(b, mock.Config{Tokens: 64})
}

func benchEnvWith(b *testing.B, cfg mock.Config) (*env, *http.Client, string) {
	t := &testing.T{}
	e := newEnv(t, cfg)
	b.Cleanup(func() {})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	direct := strings.TrimSuffix(e.pol.Route("primary").Provider.BaseURL, "/v1")
	return e, client, direct
}

func BenchmarkJSONDirect(b *testing.B) {
	_, client, direct := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		benchPost(b, client, direct+"/v1/chat/completions", `{"model":"primary-model","messages":[{"role":"user","content":"hi"}]}`, false)
	}
}

func BenchmarkJSONGateway(b *testing.B) {
	e, client, _ := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		benchPost(b, client, e.url+"/v1/chat/completions", `{"model":"solo","messages":[{"role":"user","content":"hi"}]}`, true)
	}
}

// BenchmarkJSONGatewayDistinct is BenchmarkJSONGateway with a body of
// its own for every request, as the load benchmark sends: each one is
// run, not answered from the ledger.
func BenchmarkJSONGatewayDistinct(b *testing.B) {
	benchDistinct(b, mock.Config{Tokens: 64}, false)
}

// benchDistinct posts a request with a body of its own each time (an
// identical one would be answered from the ledger), streamed or not.
func benchDistinct(b *testing.B, cfg mock.Config, stream bool) {
	e, client, _ := benchEnvWith(b, cfg)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		benchPost(b, client, e.url+"/v1/chat/completions", `{"model":"solo","stream":`+strconv.FormatBool(stream)+
			`,"messages":[{"role":"user","content":"hi `+strconv.Itoa(n)+`"}]}`, true)
	}
}

func BenchmarkStreamDirect(b *testing.B) {
	_, client, direct := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		benchPost(b, client, direct+"/v1/chat/completions", `{"model":"primary-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`, false)
	}
}

func BenchmarkStreamGateway(b *testing.B) {
	benchDistinct(b, mock.Config{Tokens: 64}, true)
}

// BenchmarkStreamGatewayPaced is a stream as the load benchmark's are:
// its tokens apart, so that each goes to the client on its own, and
// distinct bodies. Its B/op is what a stream and its request allocate
// (docs/performance.md, Memory), the mock's and the client's included:
// BenchmarkStreamDirectPaced is those alone.
func BenchmarkStreamGatewayPaced(b *testing.B) {
	benchDistinct(b, mock.Config{Tokens: 20, TokenInterval: 100 * time.Microsecond}, true)
}

func BenchmarkStreamDirectPaced(b *testing.B) {
	_, client, direct := benchEnvWith(b, mock.Config{Tokens: 20, TokenInterval: 100 * time.Microsecond})
	b.ReportAllocs()
	for b.Loop() {
		benchPost(b, client, direct+"/v1/chat/completions", `{"model":"primary-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`, false)
	}
}

// The steady-state path with a virtual key (docs/keys-and-teams.md) beside the same
// request with a tenant's key from the configuration: the key is found by
// its digest in the cache, so neither reads the store to authenticate.
func BenchmarkJSONGatewayFileKey(b *testing.B) {
	e, client, _ := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		benchPostAs(b, client, e.url+"/v1/chat/completions", `{"model":"solo","messages":[{"role":"user","content":"hi"}]}`, keyAcme)
	}
}

func BenchmarkJSONGatewayVirtualKey(b *testing.B) {
	e, client, _ := benchEnv(b)
	key := benchIssue(b, client, e.url, `{"tenant":"acme","models":["solo"],"budget":{"requests_per_minute":100000000,"tokens_per_minute":100000000000,"cost_usd_per_day":1000000}}`)
	b.ReportAllocs()
	for b.Loop() {
		benchPostAs(b, client, e.url+"/v1/chat/completions", `{"model":"solo","messages":[{"role":"user","content":"hi"}]}`, key)
	}
}

// benchIssue issues a virtual key through the admin API.
func benchIssue(b *testing.B, client *http.Client, url, body string) string {
	req, _ := http.NewRequest("POST", url+"/admin/keys", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+keyAdmin)
	res, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var v struct{ Key string }
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || res.StatusCode != 201 {
		b.Fatalf("issue: %d %v", res.StatusCode, err)
	}
	return v.Key
}

func benchPostAs(b *testing.B, client *http.Client, url, body, key string) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, bufio.NewReader(res.Body)); err != nil {
		b.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != 200 {
		b.Fatalf("status %d", res.StatusCode)
	}
}
