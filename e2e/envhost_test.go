package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvFileHostOffLoopbackRefusedE2E: an executor.env_file setting
// EXECUTOR_HOST=0.0.0.0 (or ::) on a loopback box is invalid
// configuration: `hbx run executor` exits 2 with one line naming the
// file, the key and the rule, and starts nothing (no pidfile in the
// state directory). On the Docker box (executor.exposure network) the
// same file is the design; TestNetworkExposureE2E runs it.
func TestEnvFileHostOffLoopbackRefusedE2E(t *testing.T) {
	requireE2E(t)
	b := installedBox(t)
	env := filepath.Join(t.TempDir(), "executor.env")
	setExecutorKeys(t, b, "  env_file: "+env+"\n")
	for _, host := range []string{"0.0.0.0", "::"} {
		t.Run(host, func(t *testing.T) {
			writeFile(t, env, "A=1\nEXECUTOR_HOST="+host+"\n", 0o600)
			r := b.hbx("run", "executor")
			msg := strings.TrimSpace(r.stderr)
			if r.code != 2 || strings.Count(msg, "\n") != 0 {
				t.Fatalf("hbx run executor with EXECUTOR_HOST=%s in the env file = %d\n%s\nwant exit 2 and one line", host, r.code, r.stderr)
			}
			for _, want := range []string{env, "EXECUTOR_HOST", "loopback only"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the refusal %q does not name %q", msg, want)
				}
			}
			if _, err := os.Lstat(filepath.Join(b.stateDir, "executor.pid")); !os.IsNotExist(err) {
				t.Errorf("a pidfile after the refusal: %v", err)
			}
		})
	}
}
