package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/oncegate/oncegate/internal/catalog"
)

// modelsCmd lists the model catalogue shipped with the binary
// (docs/routing.md): what a route that names one of these models without
// a price bills, and the context window and output limit it gets.
func modelsCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("models", "[--json] [--family F]",
		"List the model catalogue: prices in USD per million tokens, context window and output limit, and the names each model goes by.",
		"", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	family := fs.String("family", "", "only this family (openai, anthropic, google, amazon, meta, mistral)")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	var list []catalog.Model
	for _, m := range catalog.All() {
		if *family == "" || m.Family == *family {
			list = append(list, m)
		}
	}
	if len(list) == 0 {
		fmt.Fprintf(stderr, "oncegate models: no model of family %q\n", *family)
		return 1
	}
	if *asJSON {
		type entry struct {
			Name        string   `json:"name"`
			IDs         []string `json:"ids,omitempty"`
			Family      string   `json:"family"`
			Input       float64  `json:"input_usd_per_mtok"`
			Output      float64  `json:"output_usd_per_mtok"`
			CachedInput float64  `json:"cached_input_usd_per_mtok,omitempty"`
			CacheWrite  float64  `json:"cache_write_usd_per_mtok,omitempty"`
			Context     int64    `json:"max_context_tokens"`
			MaxOutput   int64    `json:"max_output_tokens"`
		}
		out := struct {
			Compiled string  `json:"compiled"`
			Models   []entry `json:"models"`
		}{Compiled: catalog.Compiled}
		for _, m := range list {
			out.Models = append(out.Models, entry{m.Name, m.IDs, m.Family, m.Input, m.Output, m.CachedInput, m.CacheWrite, m.Context, m.MaxOutput})
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "oncegate models: %v\n", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stdout, "model catalogue, compiled %s from the providers' public price lists (USD per million tokens)\n\n", catalog.Compiled)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tFAMILY\tINPUT\tOUTPUT\tCACHED\tCACHE WRITE\tCONTEXT\tMAX OUTPUT\tALSO")
	for _, m := range list {
		fmt.Fprintf(tw, "%s\t%s\t%g\t%g\t%s\t%s\t%d\t%d\t%s\n", m.Name, m.Family, m.Input, m.Output, orDash(m.CachedInput), orDash(m.CacheWrite),
			m.Context, m.MaxOutput, strings.Join(m.IDs, " "))
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(stderr, "oncegate models: %v\n", err)
		return 1
	}
	return 0
}

func orDash(f float64) string {
	if f == 0 {
		return "–"
	}
	return fmt.Sprintf("%g", f)
}
