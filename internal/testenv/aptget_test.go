package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAptGetWaitsForALock: while another apt holds the package lists'
// lock (a fresh VM's unattended upgrades), scripts/aptget.sh's apt_get
// update waits and then succeeds, instead of failing at once as plain
// apt-get does even with DPkg::Lock::Timeout (issue 25 item 8). apt-get
// runs on lists, cache and sources of the test's own, so the system's
// locks are never taken.
func TestAptGetWaitsForALock(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		Missing(t, "apt-get is missing (a Debian host)")
	}
	root := RepoRoot(t)
	dir := t.TempDir()
	for _, d := range []string{"lists/partial", "parts", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lists", "lock"), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	fl := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(lock.Fd(), unix.F_SETLK, &fl); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("bash", "-c", `source scripts/aptget.sh && apt_get -o Dir::State::Lists="$1/lists" -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$1/parts" -o Dir::Cache="$1/cache" update -qq`, "bash", dir)
	c.Dir = root
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	lines := bufio.NewScanner(stderr)
	waiting := false
	for lines.Scan() {
		if strings.Contains(lines.Text(), "another apt holds its lock; waiting") {
			waiting = true
			break
		}
		t.Logf("apt_get: %s", lines.Text())
	}
	go func() {
		for lines.Scan() {
		}
		done <- c.Wait()
	}()
	if !waiting {
		t.Fatalf("apt_get update did not wait for the held lock: %v", <-done)
	}
	fl.Type = unix.F_UNLCK
	if err := unix.FcntlFlock(lock.Fd(), unix.F_SETLK, &fl); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("apt_get update after the lock was let go: %v", err)
		}
	case <-time.After(120 * time.Second):
		c.Process.Kill()
		t.Fatal("apt_get update still runs 120s after the lock was let go")
	}
}

// TestEveryAptGetWaits: every script that installs packages runs apt-get
// through apt_get (scripts/aptget.sh), so none fails at once on a busy
// machine.
func TestEveryAptGetWaits(t *testing.T) {
	root := RepoRoot(t)
	files, _ := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	files = append(files, filepath.Join(root, ".ci", "run"))
	call := regexp.MustCompile(`(^|[;&|{(]\s*|^\s*(\S+=\S+\s+)*)apt-get\s`)
	for _, f := range files {
		if filepath.Base(f) == "aptget.sh" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			code := strings.TrimSpace(line)
			if strings.HasPrefix(code, "#") || strings.HasPrefix(code, "echo ") || strings.Contains(code, "die ") {
				continue
			}
			if call.MatchString(code) {
				t.Errorf("%s:%d runs apt-get directly, not through apt_get: %s", f, i+1, code)
			}
		}
	}
}
