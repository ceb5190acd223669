package e2e

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The release build is a static binary without the crash tests' hook,
// and what the packaging runs — the Dockerfile's command, compose's
// replicas and their configuration, the systemd unit — is accepted by it.
func TestPackaging(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the release build with CGO_ENABLED=0 compiles everything a second time (minutes on a cold cache); bash .ci/run runs it")
	}
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
	checkUnit(t, string(unit))
	checkVolume(t, string(docker))
	checkCompose(t, string(compose))
	checkHealth(t, bin, string(docker))
}

// The unit reloads with SIGHUP: systemctl reload re-reads the
// configuration and its key files.
func checkUnit(t *testing.T, unit string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^ExecReload=/bin/kill -HUP \$MAINPID$`).MatchString(unit) {
		t.Fatal("deploy/oncegate.service has no ExecReload=/bin/kill -HUP $MAINPID")
	}
}

// The image's volume directory exists and belongs to the user the image
// runs as, so a fresh volume mounted there (which Docker initialises from
// it) is writable: the distroless base has no shell to create it.
func checkVolume(t *testing.T, docker string) {
	t.Helper()
	vol := regexp.MustCompile(`(?m)^VOLUME \["([^"]+)"\]$`).FindStringSubmatch(docker)
	user := regexp.MustCompile(`(?m)^USER (\S+)$`).FindStringSubmatch(docker)
	if vol == nil || user == nil || user[1] != "nonroot:nonroot" {
		t.Fatalf("the Dockerfile's VOLUME %v and USER %v", vol, user)
	}
	owned := regexp.MustCompile(`(?m)^COPY --from=build --chown=65532:65532 (\S+) ` + regexp.QuoteMeta(vol[1]) + `$`).FindStringSubmatchIndex(docker)
	if owned == nil || owned[0] > strings.Index(docker, "VOLUME ") {
		t.Fatalf("the Dockerfile does not create %s owned by nonroot (65532) before its VOLUME", vol[1])
	}
	made := docker[owned[2]:owned[3]]
	if !regexp.MustCompile(`(?m)^RUN mkdir -p ` + regexp.QuoteMeta(made) + `$`).MatchString(docker) {
		t.Fatalf("the Dockerfile copies %s, which its build stage does not create", made)
	}
}

// compose puts a load balancer, configured from a file in deploy/, in
// front of every replica, and no store URL carries a password: the
// passwords are files mounted as compose secrets.
func checkCompose(t *testing.T, compose string) {
	t.Helper()
	cfg, _ := os.ReadFile("../../deploy/compose.oncegate.yaml")
	for name, text := range map[string]string{"compose.yaml": compose, "deploy/compose.oncegate.yaml": string(cfg)} {
		if m := regexp.MustCompile(`postgres(ql)?://[^/@\s]+:[^/@\s]+@`).FindString(text); m != "" {
			t.Fatalf("%s has a password in a URL: %s", name, m)
		}
	}
	lb := regexp.MustCompile(`(?m)^  \w+:\n    image: (nginx|haproxy)\S*\n    volumes: \["\./(deploy/[^:]+):`).FindStringSubmatch(compose)
	if lb == nil {
		t.Fatal("compose.yaml has no nginx or haproxy service with its configuration from deploy/")
	}
	conf, err := os.ReadFile("../../" + lb[2])
	if err != nil {
		t.Fatal(err)
	}
	replicas := regexp.MustCompile(`(?m)^  (oncegate-\d+):$`).FindAllStringSubmatch(compose, -1)
	if len(replicas) != 3 {
		t.Fatalf("compose.yaml has %d replicas, want 3", len(replicas))
	}
	for _, r := range replicas {
		if !strings.Contains(string(conf), r[1]+":8080") {
			t.Fatalf("%s does not balance over %s", lb[2], r[1])
		}
	}
	for _, f := range regexp.MustCompile(`\{file: \./(deploy/[^}\s]+)\}`).FindAllStringSubmatch(compose, -1) {
		if _, err := os.Stat("../../" + f[1]); err != nil {
			t.Fatalf("compose.yaml's secret: %v", err)
		}
	}
	if !strings.Contains(compose, "PGPASSFILE: /run/secrets/pgpass") || !strings.Contains(compose, "POSTGRES_PASSWORD_FILE:") {
		t.Fatal("compose.yaml does not give PostgreSQL and the replicas their password by file")
	}
}

// oncegate health asks a running gateway — the Dockerfile's HEALTHCHECK
// runs it — and exits 0 while it is up, 1 for a port nothing answers on;
// serve --metrics-listen serves /metrics there with no key.
func checkHealth(t *testing.T, bin, docker string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^HEALTHCHECK .*CMD (\[.*\])$`).FindStringSubmatch(docker)
	if m == nil {
		t.Fatal("the Dockerfile has no HEALTHCHECK CMD [...]")
	}
	var hc []string
	if err := json.Unmarshal([]byte(m[1]), &hc); err != nil || len(hc) < 2 || hc[0] != "/usr/local/bin/oncegate" || hc[1] != "health" {
		t.Fatalf("HEALTHCHECK %v: want /usr/local/bin/oncegate health …", hc)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "oncegate.yaml")
	if err := os.WriteFile(config, []byte(strings.ReplaceAll(configTemplate, "MOCK", "http://127.0.0.1:1")), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(bin, "serve", "--config", config, "--store", "memory://", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	srv.Env = append(os.Environ(), "ONCEGATE_E2E_KEY="+apiKey)
	out, _ := srv.StdoutPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	stdout := &lines{seen: make(chan struct{}, 1)}
	go pipe(out, stdout)
	url := stdout.wait(t, listening, 30*time.Second)[1]
	metricsURL := stdout.wait(t, regexp.MustCompile(`oncegate metrics on (http://\S+)`), 10*time.Second)[1]
	if st := getStatus(t, metricsURL, ""); st != 200 {
		t.Fatalf("--metrics-listen: /metrics %d", st)
	}
	if st := getStatus(t, url+"/metrics", ""); st != 404 {
		t.Fatalf("/metrics on the API port beside --metrics-listen: %d", st)
	}
	run := func(args ...string) (int, string) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	args := append(slices.Clone(hc[1:]), "--url", url) // the last --url wins
	for _, a := range [][]string{args, {"health", "--url", url, "--ready"}} {
		if code, out := run(a...); code != 0 {
			t.Fatalf("%v against a running gateway: exit %d\n%s", a, code, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	if code, out := run("health", "--url", dead); code != 1 {
		t.Fatalf("health against a dead port: exit %d\n%s", code, out)
	}
}
