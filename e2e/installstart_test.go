package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/supervisor"
)

// TestSuperviseInstallOnStartRetryE2E: with executor.install_on_start, a
// supervisor whose registry fails the first pulls shows the failed install
// in hbx status (executor BACKOFF, the install's error), retries it with
// backoff like a failed start, shows the install in progress (executor
// STARTING, "installing the release (N/M layers)", the other programs
// waiting for it) and then runs Executor, without a restart of hbx
// supervise.
func TestSuperviseInstallOnStartRetryE2E(t *testing.T) {
	requireE2E(t)
	reg, img, ref := pushedInto(t, t.TempDir())
	p := registrytest.NewProxy(t, reg.URL())
	layers := layersOf(t, img)
	small := slices.MinFunc(layers, func(a, b v1.Descriptor) int { return int(a.Size - b.Size) })
	// Two pulls fail at the first manifest; the third is slow on one
	// layer (about 3s), long enough to be seen installing.
	p.Add(registrytest.Rule{Kind: registrytest.Manifest, Times: 2, Fault: registrytest.Status(503)},
		registrytest.Rule{Path: small.Digest.String(), Times: 1, Fault: registrytest.Drip(max(small.Size/60, 1), 50*time.Millisecond)})
	b := proxiedBox(t, reg, p.Host()+"/"+ref, img, "  retries: 0\n")
	cfg := strings.Replace(readFile(t, b.config), "executor:\n", "executor:\n  install_on_start: true\n", 1)
	writeFile(t, b.config, cfg, 0o600)
	socket, dir := supervisorConfig(t, b, `  executor:
    startretries: 3
  worker:
    command: ["sleep", "1000"]
    depends_on: [executor]
`)
	s := startSupervise(t, b, socket, dir)

	var sawFailure, sawInstalling, sawWaiting bool
	deadline := time.Now().Add(3 * time.Minute)
	for {
		r := b.hbx("status", "--json")
		var sts []supervisor.Status
		if json.Unmarshal([]byte(r.stdout), &sts) == nil && len(sts) > 0 {
			ex, w := statusOf(sts, "executor"), statusOf(sts, "worker")
			switch {
			case ex.State == supervisor.Backoff && strings.Contains(ex.Detail, "install failed: ") && strings.Contains(ex.Detail, "503") && strings.Contains(ex.Detail, "retry "):
				if !sawFailure {
					t.Logf("failure: %s %s", ex.State, ex.Detail)
				}
				sawFailure = true
			case ex.State == supervisor.Starting && strings.HasPrefix(ex.Detail, "installing the release (") && strings.Contains(ex.Detail, " layers)"):
				if !sawInstalling {
					t.Logf("installing: %s %s; worker %s %s", ex.State, ex.Detail, w.State, w.Detail)
				}
				sawInstalling = true
				if w.State == supervisor.Stopped && strings.Contains(w.Detail, "the release is being installed first") {
					sawWaiting = true
				}
			case ex.State == supervisor.Fatal:
				t.Fatalf("executor FATAL: %s", ex.Detail)
			}
			if ex.State == supervisor.Running {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("executor not RUNNING after 3m; last status:\n%s%s", r.stdout, r.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawFailure || !sawInstalling || !sawWaiting {
		t.Errorf("status showed the failed install %v, the install in progress %v, the worker waiting for it %v; want all", sawFailure, sawInstalling, sawWaiting)
	}
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running, "worker": supervisor.Running})
	if s.cmd.ProcessState != nil {
		t.Fatalf("hbx supervise exited: %v", s.cmd.ProcessState)
	}
	if n := p.Count(registrytest.Manifest, ""); n < 3 {
		t.Errorf("%d manifest requests, want the two failed pulls and a third", n)
	}
}

// TestRestartDuringInstallOnStartWaitsE2E: `hbx restart executor` run
// while hbx supervise installs the pinned release first (install on
// start, one layer slowed to about 15s) waits for the install, then
// restarts Executor on the installed release: exit 0, Executor RUNNING,
// the supervisor's log saying the restart waited. Before, it was refused
// at once ("run `hbx install` first", exit 1) although the supervisor was
// installing that very release.
func TestRestartDuringInstallOnStartWaitsE2E(t *testing.T) {
	requireE2E(t)
	reg, img, ref := pushedInto(t, t.TempDir())
	p := registrytest.NewProxy(t, reg.URL())
	layers := layersOf(t, img)
	small := slices.MinFunc(layers, func(a, b v1.Descriptor) int { return int(a.Size - b.Size) })
	p.Add(registrytest.Rule{Path: small.Digest.String(), Times: 1, Fault: registrytest.Drip(max(small.Size/300, 1), 50*time.Millisecond)})
	b := proxiedBox(t, reg, p.Host()+"/"+ref, img, "")
	cfg := strings.Replace(readFile(t, b.config), "executor:\n", "executor:\n  install_on_start: true\n", 1)
	writeFile(t, b.config, cfg, 0o600)
	socket, dir := supervisorConfig(t, b, "")
	s := startSupervise(t, b, socket, dir)
	c := s.client()
	deadline := time.Now().Add(slow(t, 3*time.Minute))
	for {
		sts, err := c.Status(context.Background())
		if ex := statusOf(sts, "executor"); err == nil && ex.State == supervisor.Starting && strings.HasPrefix(ex.Detail, "installing the release (") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("executor not seen installing within 3m: %+v, %v", sts, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := b.hbx("restart", "executor")
	if r.code != 0 {
		t.Fatalf("hbx restart executor during the install on start = %d, want 0 (wait for the install)\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("hbx restart executor: %s", strings.TrimSpace(r.stdout))
	s.waitStates(60*time.Second, map[string]supervisor.State{"executor": supervisor.Running})
	if log := readFile(t, s.log); !strings.Contains(log, "restart waits for the install on start to finish") {
		t.Errorf("the supervisor's log does not say the restart waited for the install (did the install end before the restart arrived?)")
	}
}
