package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/supervisorclient"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/supervisor"
)

// serveRefusing serves a real supervisor on a socket under a temporary
// directory until the test ends: program "executor" (/bin/sleep, not
// started) whose Check fails with check, and "hermes" (/bin/sleep, no
// Check), with hbx's ErrorClasses; it returns a configuration naming
// the socket.
func serveRefusing(t *testing.T, check error) *config.Config {
	t.Helper()
	dir, err := os.MkdirTemp("", "hbxbox") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var progs []supervisor.Program
	for _, n := range []string{"executor", "hermes"} {
		p := supervisor.Program{Name: n, Command: []string{"/bin/sleep", "600"}, Directory: dir, StopWait: 5 * time.Second,
			Stdout: supervisor.LogFile{Path: filepath.Join(dir, n+".out")}, Stderr: supervisor.LogFile{Path: filepath.Join(dir, n+".err")}}
		if n == "executor" {
			p.Check = func(context.Context) error { return check }
		}
		progs = append(progs, p)
	}
	sock := filepath.Join(dir, "s.sock")
	s, err := supervisor.New(supervisor.Options{Programs: progs, Socket: sock, ErrorClasses: supervisorclient.ErrorClasses})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	cfg := config.Defaults()
	cfg.Supervisor.Socket = sock
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := supervisor.Dial(ctx, sock); err == nil {
			return &cfg
		} else if time.Now().After(deadline) {
			t.Fatalf("Dial(%s) = %v after 30s", sock, err)
		}
	}
}

// TestControlRefusalExitCodes proves that a start or restart the
// executor's Check refuses in the supervisor exits as the exit-code
// table says for its cause: 2 for a bad env or token file (the class
// crosses the control socket), 1 for a release not installed; "restart
// all" restarts hermes and prints a line for the refused executor, and
// exits the same. Before, every refusal over the socket exited 1, and
// restart all was refused whole.
func TestControlRefusalExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check error
		code  int
	}{
		{"env file", fmt.Errorf("env file /etc/hbx/executor.env: readable by others: %w", launch.ErrEnvFile), exitUsage},
		{"token file", fmt.Errorf("executor.token_file /etc/hbx/token: empty: %w", launch.ErrTokenFile), exitUsage},
		{"not installed", fmt.Errorf("%w: release does not match the configuration", launch.ErrNotInstalled), exitFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := serveRefusing(t, tc.check)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for _, verb := range []string{"start", "restart"} {
				var out bytes.Buffer
				err := runControl(ctx, controlOptions{cfg: cfg, verb: verb, names: []string{"executor"}, stdout: &out})
				nothing := map[string]string{"start": "nothing started", "restart": "nothing stopped"}[verb]
				if code := exitCode(err); code != tc.code || err == nil || !strings.Contains(err.Error(), tc.check.Error()) || !strings.HasSuffix(err.Error(), nothing) {
					t.Errorf("hbx %s executor = %v (exit %d); want exit %d, the check's error and %q", verb, err, code, tc.code, nothing)
				}
			}
			var out bytes.Buffer
			err := runControl(ctx, controlOptions{cfg: cfg, verb: "restart", names: []string{"all"}, stdout: &out})
			if code := exitCode(err); code != tc.code {
				t.Errorf("hbx restart all = %v (exit %d); want exit %d", err, code, tc.code)
			}
			want := "executor: ERROR (restart executor: " + tc.check.Error() + "; nothing stopped)\nhermes: restarted\n"
			if out.String() != want {
				t.Errorf("hbx restart all printed %q; want %q", out.String(), want)
			}
		})
	}
}
