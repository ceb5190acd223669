package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/oncegate/oncegate/internal/litellm"
)

// importCmd translates another gateway's configuration into oncegate's
// and prints it (docs/migrating-from-litellm.md). Exit 1 when the file
// cannot be read or translated, naming the file, the position and the
// key; 2 for a usage error.
func importCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("import", "litellm CONFIG.yaml",
		"Print an oncegate configuration translated from a LiteLLM proxy config: its deployments as providers, routes and models,\n"+
			"its router and proxy settings, its master key as the admin key; what has no equivalent becomes a comment.\n"+
			"Redirect it to a file and check it: oncegate import litellm litellm.yaml > oncegate.yaml && oncegate check --config oncegate.yaml",
		`  the variables the LiteLLM config names as os.environ/NAME for a value
  oncegate writes into its file (api_base, api_version, aws_region_name,
  vertex_project, vertex_location): read now; VERTEXAI_PROJECT,
  VERTEXAI_LOCATION and AWS_REGION when the config leaves those out.
  Keys stay in the environment: the output names their variables`, stderr)
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if fs.NArg() != 2 || fs.Arg(0) != "litellm" {
		fmt.Fprintln(stderr, "oncegate import: want `litellm CONFIG.yaml` (LiteLLM is the one format it reads)")
		fs.Usage()
		return 2
	}
	path := fs.Arg(1)
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate import: %v\n", err)
		return 1
	}
	c, err := litellm.Parse(path, data)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate import: %v\n", err)
		return 1
	}
	res, err := litellm.Translate(c, os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate import: %v\n", err)
		return 1
	}
	if _, err := io.WriteString(stdout, res.YAML); err != nil {
		fmt.Fprintf(stderr, "oncegate import: %v\n", err)
		return 1
	}
	if len(res.Env) > 0 {
		fmt.Fprintf(stderr, "oncegate import: serve will read %s from the environment\n", strings.Join(res.Env, ", "))
	}
	return 0
}
