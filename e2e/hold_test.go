package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for a process's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// holdBox is a config with no installed release: its own socket, log,
// runtime, data and state directories under dir, plus extra.
func holdBox(t *testing.T, extra string) (cfg, sock string) {
	t.Helper()
	dir := t.TempDir()
	sock = filepath.Join(dir, "run", "hbx.sock")
	c := fmt.Sprintf(`executor:
  user: root
  runtime_dir: %s
  data_dir: %s
  state_dir: %s
  port: %d
supervisor:
  socket: %s
  log_dir: %s
programs:
  hermes:
    enabled: false
%s`, filepath.Join(dir, "runtime"), filepath.Join(dir, "workspace/data"), filepath.Join(dir, "state"), freePort(t),
		sock, filepath.Join(dir, "log"), extra)
	cfg = filepath.Join(dir, "hbx.yaml")
	if err := os.WriteFile(cfg, []byte(c), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, sock
}

// startHold starts `hbx supervise --hold-on-error` with cfg; the returned
// buffer collects its stderr and done is closed once it has exited.
func startHold(t *testing.T, cfg string, extra ...string) (*exec.Cmd, *lockedBuffer, chan struct{}) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"--config", cfg, "supervise", "--hold-on-error"}, extra...)...)
	cmd.Env = cleanEnv()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd, &stderr, done
}

// exited reports whether done is closed.
func exited(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// stillUp fails the test when the process ended within d.
func stillUp(t *testing.T, done chan struct{}, d time.Duration, stderr *lockedBuffer) {
	t.Helper()
	select {
	case <-done:
		t.Fatalf("hbx supervise --hold-on-error exited instead of holding; stderr:\n%s", stderr.String())
	case <-time.After(d):
		if exited(done) {
			t.Fatalf("hbx supervise --hold-on-error exited instead of holding; stderr:\n%s", stderr.String())
		}
	}
}

// stopsWith signals cmd and wants it to exit with code within a generous
// deadline.
func stopsWith(t *testing.T, cmd *exec.Cmd, done chan struct{}, sig syscall.Signal, code int) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("hbx supervise --hold-on-error did not exit within 30s of %v", sig)
	}
	if got := cmd.ProcessState.ExitCode(); got != code {
		t.Errorf("exit status after %v = %d, want %d", sig, got, code)
	}
}

// TestHoldOnErrorE2E: hbx supervise --hold-on-error stays up with its
// start-up error instead of exiting (a bad config; a program's missing
// user; the data lock held by another supervisor), prints it as one line,
// ignores HUP, makes hbx health fail with that same error, and exits with
// the error's status on TERM, INT or QUIT, leaving no held file behind.
func TestHoldOnErrorE2E(t *testing.T) {
	requireE2E(t)

	t.Run("bad config", func(t *testing.T) {
		cfg, _ := holdBox(t, "")
		bad := strings.Replace(readFile(t, cfg), "  port: ", "  port: 0\n  host_port: ", 1)
		if err := os.WriteFile(cfg, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd, stderr, done := startHold(t, cfg)
		waitFor(t, "the error line", time.Minute, func() bool { return len(errorLines(t, stderr.String())) > 0 })
		stillUp(t, done, 2*time.Second, stderr)
		line := errorLines(t, stderr.String())[0]
		t.Logf("held error: %s", line)
		if !strings.Contains(line, "executor.port") {
			t.Errorf("error line %q does not name executor.port", line)
		}
		// hbx health loads the same config: the same error.
		h := exec.Command(binary(t), "--config", cfg, "health", "--only", "supervisor")
		h.Env = cleanEnv()
		out, err := h.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), strings.TrimPrefix(line, "hbx: ")) {
			t.Errorf("hbx health = %v:\n%s\nwant exit 2 with %q", err, out, line)
		}
		stopsWith(t, cmd, done, syscall.SIGTERM, 2)
	})

	t.Run("missing user", func(t *testing.T) {
		cfg, sock := holdBox(t, "    user: no-such-user-hbx\n")
		cfg2 := readFile(t, cfg)
		// the user belongs to an enabled program
		cfg2 = strings.Replace(cfg2, "    enabled: false\n", "    enabled: true\n    command: [/bin/true]\n", 1)
		if err := os.WriteFile(cfg, []byte(cfg2), 0o600); err != nil {
			t.Fatal(err)
		}
		held := sock + ".held"
		cmd, stderr, done := startHold(t, cfg)
		waitFor(t, "the held file", time.Minute, func() bool { _, err := os.Stat(held); return err == nil || exited(done) })
		stillUp(t, done, 0, stderr)
		lines := errorLines(t, stderr.String())
		if len(lines) != 1 || !strings.Contains(lines[0], `user "no-such-user-hbx"`) {
			t.Fatalf("stderr error lines %q, want one naming the user; stderr:\n%s", lines, stderr.String())
		}
		msg := strings.TrimPrefix(lines[0], "hbx: ")
		_ = cmd.Process.Signal(syscall.SIGHUP)
		stillUp(t, done, 2*time.Second, stderr)
		h := exec.Command(binary(t), "--config", cfg, "health", "--only", "supervisor,listeners")
		h.Env = cleanEnv()
		out, err := h.CombinedOutput()
		want := fmt.Sprintf("hbx supervise (pid %d) did not start and holds on its error: %s", cmd.Process.Pid, msg)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || strings.Count(string(out), want) != 2 {
			t.Errorf("hbx health = %v:\n%s\nwant exit 1 with %q for supervisor and listeners", err, out, want)
		}
		stopsWith(t, cmd, done, syscall.SIGINT, 2)
		if _, err := os.Stat(held); !os.IsNotExist(err) {
			t.Errorf("held file after the hold ended: %v", err)
		}
		// A second start without the error: health skips the supervisor
		// check again (no supervisor runs), no stale held error.
		h = exec.Command(binary(t), "--config", cfg, "health", "--only", "supervisor")
		h.Env = cleanEnv()
		if out, err := h.CombinedOutput(); err != nil || strings.Contains(string(out), "holds on") {
			t.Errorf("hbx health after the hold: %v:\n%s", err, out)
		}
	})

	t.Run("data lock held", func(t *testing.T) {
		cfg, sock := holdBox(t, "")
		// The first supervisor runs (executor has no release: FATAL) and
		// holds the data lock.
		first := exec.Command(binary(t), "--config", cfg, "supervise")
		first.Env = cleanEnv()
		var firstErr lockedBuffer
		first.Stderr = &firstErr
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		firstDone := make(chan struct{})
		go func() { _ = first.Wait(); close(firstDone) }()
		t.Cleanup(func() {
			_ = first.Process.Signal(syscall.SIGTERM)
			select {
			case <-firstDone:
			case <-time.After(time.Minute):
				_ = first.Process.Kill()
				<-firstDone
			}
		})
		waitFor(t, "the first supervisor's socket", time.Minute, func() bool { _, err := os.Stat(sock); return err == nil })
		// The second one, on another socket, is refused the data lock.
		dir := t.TempDir()
		sock2 := filepath.Join(dir, "hbx2.sock")
		cmd, stderr, done := startHold(t, cfg, "--supervisor-socket", sock2)
		waitFor(t, "the held file", time.Minute, func() bool { _, err := os.Stat(sock2 + ".held"); return err == nil || exited(done) })
		stillUp(t, done, 0, stderr)
		lines := errorLines(t, stderr.String())
		if len(lines) != 1 || !strings.Contains(lines[0], "hbx supervise") {
			t.Fatalf("stderr error lines %q, want one naming the holder; stderr:\n%s", lines, stderr.String())
		}
		msg := strings.TrimPrefix(lines[0], "hbx: ")
		t.Logf("held error: %s", msg)
		h := exec.Command(binary(t), "--config", cfg, "--supervisor-socket", sock2, "health", "--only", "supervisor")
		h.Env = cleanEnv()
		out, _ := h.CombinedOutput()
		if !strings.Contains(string(out), "did not start and holds on its error: "+msg) {
			t.Errorf("hbx health on the held socket:\n%s\nwant the held error %q", out, msg)
		}
		stopsWith(t, cmd, done, syscall.SIGQUIT, 1)
		select {
		case <-firstDone:
			t.Fatalf("the first supervisor exited; stderr:\n%s", firstErr.String())
		default:
		}
	})
}

// TestHoldOnErrorClasses: every class of start-up error holds (before,
// those the supervisor's Run met, the control socket and the log files,
// exited at once): hbx stays up, hbx health, hbx status (exit 3) and
// hbx stop say the held error, and TERM ends the hold with the error's status. A held
// file naming a live pid that nobody holds (pids are reused: a
// container's PID 1) is no hold.
func TestHoldOnErrorClasses(t *testing.T) {
	requireE2E(t)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, cfg, sock string) (extra []string)
		want  string // in the error line
		code  int
	}{
		{"socket path is a directory", func(t *testing.T, _, sock string) []string {
			mkfile(t, filepath.Join(sock, "x"))
			return nil
		}, "socket", 1},
		{"log dir is a file", func(t *testing.T, cfg, sock string) []string {
			mkfile(t, filepath.Join(filepath.Dir(cfg), "log"))
			return nil
		}, "log", 1},
		{"another supervisor's state lock", func(t *testing.T, cfg, sock string) []string {
			// No executor program: no data lock, the state directory's.
			appendFile(t, cfg, "  executor:\n    enabled: false\n")
			startSupervisor(t, cfg, sock)
			return []string{"--supervisor-socket", filepath.Join(t.TempDir(), "hbx2.sock")}
		}, "another supervisor is running", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, sock := holdBox(t, "")
			extra := tc.setup(t, cfg, sock)
			if len(extra) == 2 {
				sock = extra[1]
			}
			cmd, stderr, done := startHold(t, cfg, extra...)
			waitFor(t, "the held file", time.Minute, func() bool {
				_, _, ok := holdLine(sock)
				return ok || exited(done)
			})
			stillUp(t, done, 0, stderr)
			lines := errorLines(t, stderr.String())
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("stderr error lines %q, want one naming %q; stderr:\n%s", lines, tc.want, stderr.String())
			}
			msg := strings.TrimPrefix(lines[0], "hbx: ")
			t.Logf("held error: %s", msg)
			want := fmt.Sprintf("hbx supervise (pid %d) did not start and holds on its error: %s", cmd.Process.Pid, msg)
			args := append([]string{"--config", cfg}, extra...)
			for _, c := range []struct {
				args []string
				code int
			}{{[]string{"health", "--only", "supervisor"}, 1}, {[]string{"status"}, 3}, {[]string{"stop", "executor"}, 1}} {
				h := exec.Command(binary(t), append(append([]string(nil), args...), c.args...)...)
				h.Env = cleanEnv()
				out, err := h.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != c.code || !strings.Contains(string(out), want) {
					t.Errorf("hbx %s = %v:\n%s\nwant exit %d with %q", strings.Join(c.args, " "), err, out, c.code, want)
				}
			}
			stopsWith(t, cmd, done, syscall.SIGTERM, tc.code)
		})
	}

	t.Run("kill -9 and a reused pid", func(t *testing.T) {
		cfg, sock := holdBox(t, "    user: no-such-user-hbx\n")
		// the user belongs to an enabled program: held on every hbx
		if err := os.WriteFile(cfg, []byte(strings.Replace(readFile(t, cfg), "    enabled: false\n", "    enabled: true\n    command: [/bin/true]\n", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd, stderr, done := startHold(t, cfg)
		waitFor(t, "the held file", time.Minute, func() bool { _, _, ok := holdLine(sock); return ok || exited(done) })
		stillUp(t, done, 0, stderr)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-done
		// The file outlives its holder; now it names a live process (this
		// test's), as a reused pid would.
		held := sock + ".held"
		if err := os.WriteFile(held, []byte(fmt.Sprintf("%d\nold error\n", os.Getpid())), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"health", "--only", "supervisor"}, {"status"}} {
			h := exec.Command(binary(t), append([]string{"--config", cfg}, args...)...)
			h.Env = cleanEnv()
			out, _ := h.CombinedOutput()
			if strings.Contains(string(out), "holds on its error") || strings.Contains(string(out), "old error") {
				t.Errorf("hbx %s after kill -9 of the hold:\n%s\nwant no held error", strings.Join(args, " "), out)
			}
		}
	})
}

// holdLine reads sock's held file: its pid line and error line, ok once
// both are written.
func holdLine(sock string) (pid, msg string, ok bool) {
	b, err := os.ReadFile(sock + ".held")
	if err != nil {
		return "", "", false
	}
	pid, msg, _ = strings.Cut(string(b), "\n")
	return pid, msg, strings.HasSuffix(msg, "\n")
}

// appendFile appends text to the file at path.
func appendFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(readFile(t, path)+text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// mkfile creates an empty file at path, with its parents.
func mkfile(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startSupervisor runs `hbx supervise` on cfg until the test ends and
// waits for its socket.
func startSupervisor(t *testing.T, cfg, sock string) {
	t.Helper()
	first := exec.Command(binary(t), "--config", cfg, "supervise")
	first.Env = cleanEnv()
	var firstErr lockedBuffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	firstDone := make(chan struct{})
	go func() { _ = first.Wait(); close(firstDone) }()
	t.Cleanup(func() {
		_ = first.Process.Signal(syscall.SIGTERM)
		select {
		case <-firstDone:
		case <-time.After(time.Minute):
			_ = first.Process.Kill()
			<-firstDone
		}
	})
	waitFor(t, "the first supervisor's socket", time.Minute, func() bool { _, err := os.Stat(sock); return err == nil || exited(firstDone) })
	if exited(firstDone) {
		t.Fatalf("hbx supervise exited; stderr:\n%s", firstErr.String())
	}
}
