package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/oncegate/oncegate/internal/admin"
)

// spendCmd prints a running gateway's spend report (GET /admin/spend,
// docs/keys-and-teams.md): the same rows, as a table, JSON or CSV.
func spendCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("spend", "--config FILE --url http://HOST:PORT [--group-by G] [--from T] [--to T] [--tenant T] [--format F]",
		"Print the spend report of the gateway at --url, computed from its receipts: requests, attempts, tokens and cost "+
			"per tenant, key, model, route or UTC day over [--from, --to) (default: today so far).",
		"  the admin key, from the variable the configuration's admin_key_env names (or the file admin_key_file names)", stderr)
	path := fs.String("config", "", "the configuration the gateway runs (required: it names the admin key)")
	addr := fs.String("url", "", "the gateway's address, e.g. http://127.0.0.1:8080 (required)")
	groupBy := fs.String("group-by", "tenant", "tenant, key, model, route or day")
	from := fs.String("from", "", "start, RFC 3339 or a date (default: today 00:00 UTC)")
	to := fs.String("to", "", "end, exclusive (default: now)")
	tenant := fs.String("tenant", "", "one tenant only")
	format := fs.String("format", "table", "table, json or csv")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if *path == "" || *addr == "" || (*format != "table" && *format != "json" && *format != "csv") {
		fs.Usage()
		return 2
	}
	pol, secrets, code := loadConfig(*path, stderr)
	if pol == nil {
		return code
	}
	if secrets.AdminKey == "" {
		fmt.Fprintln(stderr, "oncegate spend: the configuration sets no admin key (admin_key_env or admin_key_file)")
		return 2
	}
	q := url.Values{"group_by": {*groupBy}}
	for k, v := range map[string]string{"from": *from, "to": *to, "tenant": *tenant} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *format == "csv" {
		q.Set("format", "csv")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(*addr, "/")+"/admin/spend?"+q.Encode(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate spend: %v\n", err)
		return 2
	}
	req.Header.Set("Authorization", "Bearer "+secrets.AdminKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate spend: %v\n", err)
		return 1
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "oncegate spend: HTTP %d: %s\n", res.StatusCode, body)
		return 1
	}
	if *format != "table" {
		_, _ = stdout.Write(body)
		return 0
	}
	var rep struct{ Data []admin.SpendRow }
	if err := json.Unmarshal(body, &rep); err != nil {
		fmt.Fprintf(stderr, "oncegate spend: %v\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tREQUESTS\tATTEMPTS\tINPUT TOKENS\tOUTPUT TOKENS\tCOST USD\tORPHANS USD\n", strings.ToUpper(*groupBy))
	for _, r := range rep.Data {
		group := r.Group
		if group == "" {
			group = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.6f\t%.6f\n", group, r.Requests, r.Attempts, r.InputTokens, r.OutputTokens, r.CostUSD, r.OrphansCostUSD)
	}
	_ = tw.Flush()
	return 0
}
