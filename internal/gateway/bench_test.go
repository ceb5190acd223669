package gateway

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

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
	t := &testing.T{}
	e := newEnv(t, mock.Config{Tokens: 64})
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

func BenchmarkStreamDirect(b *testing.B) {
	_, client, direct := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		benchPost(b, client, direct+"/v1/chat/completions", `{"model":"primary-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`, false)
	}
}

func BenchmarkStreamGateway(b *testing.B) {
	e, client, _ := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		benchPost(b, client, e.url+"/v1/chat/completions", `{"model":"solo","stream":true,"messages":[{"role":"user","content":"hi"}]}`, true)
	}
}
