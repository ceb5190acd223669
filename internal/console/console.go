// Package console is oncegate's web console: static assets embedded in
// the binary (no build step, nothing fetched from a CDN), which read the
// gateway's /v1/console/ JSON with the key the user gives them. See
// docs/operations.md, "Console".
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed ui
var assets embed.FS

// Handler serves the console's assets (mount it under /ui/).
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "ui")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
