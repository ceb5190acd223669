package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
)

// bodiesRun sends -bodies requests at once, each with a distinct body of
// -body-bytes, three times over, through each server path, and reports
// the server's peak RSS: what a burst of large prompts costs in memory.
func bodiesRun(ctx context.Context, o options, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.tokens == 0 {
		o.tokens = 32
	}
	paths, cleanup, err := startPaths(ctx, o)
	defer cleanup()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "oncegate large-body benchmark: %d requests at once with %.1f MB bodies, 3 waves per path\n\n",
		o.bodies, float64(o.bodyBytes)/1e6)
	filler := strings.Repeat("lorem ipsum dolor sit amet ", o.bodyBytes/27+1)[:o.bodyBytes]
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\trequests\terrors\tRSS before\tpeak RSS\tpeak − before, per request\t÷ body\t")
	seq := 0
	for _, p := range paths {
		if p.proc == nil {
			continue
		}
		base, _ := p.proc.rss()
		p.proc.resetPeak()
		var errs, ok int
		var mu sync.Mutex
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.bodies, DisableCompression: true}}
		for range 3 {
			var wg sync.WaitGroup
			for range o.bodies {
				seq++
				body := []byte(`{"model":"` + p.model + `","messages":[{"role":"user","content":"` + strconv.Itoa(seq) + " " + filler + `"}]}`)
				wg.Go(func() {
					req, _ := http.NewRequestWithContext(ctx, "POST", p.url+"/v1/chat/completions", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					if p.auth {
						req.Header.Set("Authorization", "Bearer "+benchKey)
					}
					res, err := client.Do(req)
					good := err == nil && res.StatusCode == 200
					if err == nil {
						if !good {
							b, _ := io.ReadAll(io.LimitReader(res.Body, 300))
							err = fmt.Errorf("status %d: %s", res.StatusCode, b)
						}
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
					}
					mu.Lock()
					if good {
						ok++
					} else if errs++; errs <= 3 {
						fmt.Fprintf(out, "%s: %v\n", p.name, err)
					}
					mu.Unlock()
				})
			}
			wg.Wait()
		}
		client.CloseIdleConnections()
		_, peak := p.proc.rss()
		per := float64(peak-base) / float64(o.bodies)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f MiB\t%.0f MiB\t%.1f MB\t%.1f×\t\n", p.name, ok, errs, float64(base)/(1<<20),
			float64(peak)/(1<<20), per/1e6, per/float64(o.bodyBytes))
	}
	_ = tw.Flush()
	return nil
}
