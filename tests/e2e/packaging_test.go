package e2e

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The release build is a static binary without the crash tests' hook,
// and what the packaging runs — the Dockerfile's command, compose's
// replicas and their configuration, the systemd unit — is accepted by it.
func TestPackaging(t *testing.T) {
	readSources("../..")
	dir := t.TempDir()
	bin := filepath.Join(dir, "oncegate")
	build := exec.Command("go", "build", "-ldflags", "-s -w -X main.version=v0.0.0-test", "-o", bin, "../../cmd/oncegate")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("release build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the release binary is dynamically linked")
		}
	}
	f.Close()
	data, _ := os.ReadFile(bin)
	if bytes.Contains(data, []byte("ONCEGATE_FAILPOINT")) {
		t.Fatal("the release binary carries the failpoint hook")
	}
	if out, _ := exec.Command(bin, "version").Output(); !strings.HasPrefix(string(out), "oncegate v0.0.0-test") {
		t.Fatalf("version: %q", out)
	}

	// The serve commands the packaging runs parse: they fail on the
	// missing configuration, not on a flag.
	docker, _ := os.ReadFile("../../Dockerfile")
	compose, _ := os.ReadFile("../../compose.yaml")
	unit, _ := os.ReadFile("../../deploy/oncegate.service")
	var commands [][]string
	for _, m := range regexp.MustCompile(`(?m)^CMD (\[.*\])$`).FindAllSubmatch(docker, -1) {
		var c []string
		if err := json.Unmarshal(m[1], &c); err != nil {
			t.Fatal(err)
		}
		commands = append(commands, c)
	}
	for _, m := range regexp.MustCompile(`command: (\["serve".*\])`).FindAllSubmatch(compose, -1) {
		var c []string
		if err := json.Unmarshal(m[1], &c); err != nil {
			t.Fatal(err)
		}
		commands = append(commands, c)
	}
	for _, m := range regexp.MustCompile(`(?m)^ExecStart=/usr/local/bin/oncegate (.*)$`).FindAllSubmatch(unit, -1) {
		commands = append(commands, strings.Fields(string(m[1])))
	}
	if len(commands) != 3 {
		t.Fatalf("found %d serve commands in the packaging, want 3", len(commands))
	}
	for _, c := range commands {
		args := append(c, "--config", filepath.Join(dir, "missing.yaml"))
		out, _ := exec.Command(bin, args...).CombinedOutput()
		if strings.Contains(string(out), "flag provided but not defined") || !strings.Contains(string(out), "missing.yaml") {
			t.Fatalf("%v: %s", c, out)
		}
	}
	// The static binary runs in an empty root: nothing but itself. It
	// serves the demo's mock there.
	if os.Geteuid() == 0 {
		root := t.TempDir()
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "oncegate"), data, 0o755); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		mockCmd := exec.Command("/oncegate", "mock", "--listen", addr)
		mockCmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		mockCmd.Dir = "/"
		if err := mockCmd.Start(); err != nil {
			t.Fatalf("start the binary in an empty root: %v", err)
		}
		defer func() { _ = mockCmd.Process.Kill(); _ = mockCmd.Wait() }()
		var res *http.Response
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if res, err = http.Post("http://"+addr+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)); err == nil {
				break
			}
		}
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("the binary in an empty root did not serve: %v %v", res, err)
		}
		res.Body.Close()
	} else {
		t.Log("not root: the empty-root run (chroot) is skipped")
	}
	// compose's configuration passes check.
	check := exec.Command(bin, "check", "--config", "../../deploy/compose.oncegate.yaml")
	check.Env = append(os.Environ(), "ONCEGATE_KEY_COMPOSE=sk-compose", "ONCEGATE_ADMIN_KEY=sk-compose-admin")
	if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(out), "configuration OK") {
		t.Fatalf("check compose's configuration: %v\n%s", err, out)
	}
}
