package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/oncegate/oncegate/internal/config"
)

// configEnv is what every verb that reads a configuration says of the
// environment: the file names the variables (or files), and holds no
// secret itself.
const configEnv = `  the variables the configuration names: each tenant's api_key_env (and
  api_key_envs), each provider's api_key_env, secret_env (the fingerprint
  secret) and admin_key_env; each may be a file instead (api_key_file,
  api_key_files, secret_file, admin_key_file), read again on every reload;
  oncegate check lists the ones it cannot read`

// newFlags makes a verb's flag set whose -h names its arguments, its flags
// and the environment variables it reads.
func newFlags(verb, args, what, env string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: oncegate %s\n\n%s\n", strings.TrimSpace(verb+" "+args), what)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(stderr, "\nflags:")
			fs.PrintDefaults()
		}
		if env != "" {
			fmt.Fprintf(stderr, "\nenvironment:\n%s\n", env)
		}
	}
	return fs
}

// logLevel is log.level's level.
func logLevel(c config.Log) slog.Level {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by check: debug, info, warn, error
	return level
}

// newLogger makes the gateway's logger as log configures it.
func newLogger(w io.Writer, c config.Log) *slog.Logger {
	opts := &slog.HandlerOptions{Level: logLevel(c)}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// redactURL hides a URL's password, for logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, set := u.User.Password(); set {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// parseFailed is a verb's exit code when its flags did not parse: 0 for
// -h (the usage was asked for and printed), 2 otherwise.
func parseFailed(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// version is set at build time (-ldflags "-X main.version=v1.2.3"); a
// build without it reports the module version or the VCS revision.
var version = ""

// versionCmd prints the version and how the binary was built.
func versionCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", "", "Print the version and build information.", "", stderr)
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	fmt.Fprintln(stdout, versionText())
	return 0
}

func versionText() string {
	v, rev, at, dirty := version, "", "", false
	info, ok := debug.ReadBuildInfo()
	if ok {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "oncegate %s\n", v)
	if rev != "" {
		if dirty {
			rev += " (modified)"
		}
		fmt.Fprintf(&b, "revision  %s %s\n", rev, at)
	}
	fmt.Fprintf(&b, "go        %s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return b.String()
}
