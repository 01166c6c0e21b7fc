package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestForkWindowE2E: a program waiting to start looks for leftovers of
// itself by its marker while another program restarts again and again.
// Between fork and exec a child of the supervisor holds every program's
// marker; it must never be taken for a leftover of the waiting program
// and stopped. Under qemu-user (the arm64 suite), which forks where Go
// asks for vfork, that window lasts milliseconds, and the supervisor
// used to stop the restarting program's fresh children.
func TestForkWindowE2E(t *testing.T) {
	requireE2E(t)
	b := installedBox(t)
	// Executor never answers 200: gateway waits for it, looking for its
	// own leftovers every 50ms, while flapper restarts every 50ms.
	socket, dir := supervisorConfig(t, b, gatewayProgram+`  flapper:
    command: [/bin/sh, -c, 'sleep 0.05; exit 3']
    autorestart: true
    startsecs: 0
`)
	sick := filepath.Join(b.dir, "sick.env")
	writeFile(t, sick, "HBXTEST_FAIL_HEALTH=1\n", 0o600)
	s := startSupervise(t, b, socket, dir, "env", "HBX_EXECUTOR_ENV_FILE="+sick)
	s.client()
	// At least 20 restarts while gateway waits: 8s on an idle machine,
	// longer on a busy one (each restart waits for a fork, an exec and a
	// shell), so the test polls for them rather than sleeping a fixed time.
	var log string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		log = readFile(t, s.log)
		n := strings.Count(log, "msg=spawned program=flapper")
		if n >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flapper started %d times in 2 minutes, want at least 20: the test shows nothing\n%s", n, log)
		}
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "left the program's process group") || (strings.Contains(l, "program=flapper") && strings.Contains(l, "SIGTERM")) {
			t.Errorf("a fresh child was taken for a leftover: %s", l)
		}
	}
}
