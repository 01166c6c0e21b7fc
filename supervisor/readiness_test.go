package supervisor

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// holdLock starts /bin/sh -c 'flock FILE sleep 1000' in its own process
// group and waits until the lock is held; it returns the shell's pid (the
// lock is held by its child, flock).
func holdLock(t *testing.T, file string) int {
	t.Helper()
	c := exec.Command("/bin/sh", "-c", `flock "$0" sleep 1000`, file)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = c.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(file); err == nil {
			if hs, _ := lockHolders("/proc/locks", devOf(t, file), inoOf(t, file)); len(hs) > 0 {
				return c.Process.Pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("flock %s: not held after 20s", file)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCheckLockHeld: the lock check passes only for a holder in the
// program's tree (a descendant of its leader), and names what it found.
func TestCheckLockHeld(t *testing.T) {
	dir := t.TempDir()
	held := filepath.Join(dir, "gateway.lock")
	leader := holdLock(t, held)
	free := filepath.Join(dir, "free.lock")
	if err := os.WriteFile(free, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		leader     int
		want       string // "" passes
	}{
		{"held by a child of the leader", held, leader, ""},
		{"held outside the program", held, os.Getpid() + 1<<21, "is held by pid"},
		{"not held", free, leader, "is not held"},
		{"missing", filepath.Join(dir, "none.lock"), leader, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkLockHeld(tc.path, tc.leader)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("checkLockHeld(%s, %d) = %v, want %q", tc.path, tc.leader, err, tc.want)
			}
		})
	}
}

func TestLockHolders(t *testing.T) {
	locks := filepath.Join(t.TempDir(), "locks")
	text := "1: FLOCK  ADVISORY  WRITE 14811 fe:00:9977865 0 EOF\n" +
		"1: -> FLOCK  ADVISORY  WRITE 999 fe:00:9977865 0 EOF\n" +
		"2: POSIX  ADVISORY  WRITE 12 fe:00:9977865 0 EOF\n" +
		"3: OFDLCK ADVISORY  WRITE -1 fe:00:9977865 0 EOF\n" +
		"4: FLOCK  ADVISORY  WRITE 13 fe:01:9977865 0 EOF\n"
	if err := os.WriteFile(locks, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := lockHolders(locks, 0xfe<<8, 9977865)
	if err != nil || len(got) != 2 || got[0] != 14811 || got[1] != 12 {
		t.Errorf("lockHolders = %v, %v; want [14811 12]", got, err)
	}
	if _, err := lockHolders(filepath.Join(t.TempDir(), "none"), 0, 0); err == nil {
		t.Error("lockHolders(missing file) = nil error")
	}
}

func TestCheckJSONField(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	write := func(name, text string, age time.Duration) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	running := write("running.json", `{"gateway_state": "running", "pid": 12}`, time.Second)
	for _, tc := range []struct {
		name, path, field, value string
		maxAge                   time.Duration
		want                     string // "" passes
	}{
		{"running", running, "gateway_state", "running", 120 * time.Second, ""},
		{"any age", write("old.json", `{"gateway_state": "running"}`, time.Hour), "gateway_state", "running", 0, ""},
		{"stale", write("stale.json", `{"gateway_state": "running"}`, 200*time.Second), "gateway_state", "running", 120 * time.Second, "is stale"},
		{"other value", write("starting.json", `{"gateway_state": "starting"}`, 0), "gateway_state", "running", 0, `says gateway_state "starting", want "running"`},
		{"number", running, "pid", "12", 0, ""},
		{"nested", write("nested.json", `{"a": {"b": true}}`, 0), "a.b", "true", 0, ""},
		{"no field", running, "state", "running", 0, "has no state"},
		{"not an object", write("list.json", `[1]`, 0), "a", "1", 0, "has no a"},
		{"not JSON", write("bad.json", `{`, 0), "a", "1", 0, "unexpected end of JSON input"},
		{"missing", filepath.Join(dir, "none.json"), "a", "1", 0, "no such file"},
		{"directory", dir, "a", "1", 0, "is not a regular file"},
		{"too large", write("large.json", `"`+strings.Repeat("x", jsonMax)+`"`, 0), "a", "1", 0, "is larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkJSONField(tc.path, tc.field, tc.value, tc.maxAge, now)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("checkJSONField(%s) = %v, want %q", tc.name, err, tc.want)
			}
		})
	}
}

func TestReadinessNetworkChecks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ready" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer ok.Close()
	for _, tc := range []struct {
		name string
		r    Readiness
		want string
	}{
		{"tcp open", Readiness{TCP: ok.Listener.Addr().String()}, ""},
		{"tcp closed", Readiness{TCP: closed}, "connect to " + closed},
		{"http 200", Readiness{HTTP: ok.URL + "/ready"}, ""},
		{"http 503", Readiness{HTTP: ok.URL + "/other"}, "answered 503"},
		{"http closed", Readiness{HTTP: "http://" + closed + "/"}, "GET http://" + closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := tc.r.Probe().CheckProcess(ctx, os.Getpid())
			if (err == nil) != (tc.want == "") || err != nil && (!strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrNotReady)) {
				t.Errorf("Probe(%+v) = %v, want %q wrapping ErrNotReady", tc.r, err, tc.want)
			}
		})
	}
}

// TestReadinessGatesRunning: a program with a Readiness probe stays
// STARTING ("not ready: ...") until its tree holds the lock and its state
// file says running; one that never does fails its starts and is FATAL
// after startretries.
func TestReadinessGatesRunning(t *testing.T) {
	dir := progDir(t, "p")
	lockFile, state := filepath.Join(dir, "gateway.lock"), filepath.Join(dir, "state.json")
	ready := Readiness{LockFile: lockFile, JSONFile: state, JSONField: "gateway_state", JSONValue: "running", MaxAge: time.Minute}
	p := shProgram(t, dir, "p", `sleep 1; echo '{"gateway_state": "running"}' > "$D/state.json"; exec flock "$D/gateway.lock" sleep 1000`)
	p.Probe, p.HealthWait = ready.Probe(), 20*time.Second
	never := shProgram(t, progDir(t, "never"), "never", `exec sleep 1000`)
	never.Probe, never.HealthWait, never.StartRetries = ready.Probe(), 300*time.Millisecond, 1
	s := runSupervisor(t, Options{Programs: []Program{p, never}})
	st := waitState(t, s, "p", 20*time.Second, Starting)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for st.State == Starting && !strings.Contains(st.Detail, "not ready: ") {
		time.Sleep(10 * time.Millisecond)
		if st = s.Get("p"); ctx.Err() != nil {
			t.Fatalf("p = %s %q, want STARTING not ready", st.State, st.Detail)
		}
	}
	if st.State != Starting {
		t.Errorf("p = %s %q before it was ready, want STARTING", st.State, st.Detail)
	}
	waitState(t, s, "p", 20*time.Second, Running)
	if err := checkLockHeld(lockFile, s.Get("p").PID); err != nil {
		t.Errorf("RUNNING but %v", err)
	}
	st = waitState(t, s, "never", 20*time.Second, Fatal)
	if !strings.Contains(st.Detail, "no healthy answer") || !strings.Contains(st.Detail, "gave up after 2 attempts") {
		t.Errorf("never = FATAL %q, want the failed readiness and 2 attempts", st.Detail)
	}
}

func devOf(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Dev)
}

func inoOf(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
