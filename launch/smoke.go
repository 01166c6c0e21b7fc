package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/release"
)

// SmokeScratch runs argv in the staged release inst as the payload would
// run (o's user, PATH, working directory, environment, argument mapping;
// PrepareCommand), then Smoke with timeout. It never gets o's data or
// state directory nor its port: the payload may be running on them (it
// holds the data lock), and a command that starts the server whatever its
// arguments would be a second writer of Executor's database. It gets a
// scratch data and state directory beside inst (mode 0755, so o.User
// reaches its own directories inside; removed after, or with the staging
// area by the next install) and a free port on o.Listen, whatever the
// env file says (Spec.SetEnv).
func SmokeScratch(ctx context.Context, o Options, inst *release.Installed, argv []string, timeout time.Duration) (err error) {
	name := strings.Join(argv, " ")
	scratch, err := os.MkdirTemp(filepath.Dir(inst.Dir), ".smoke-")
	if err != nil {
		return fmt.Errorf("prepare smoke command %q: %w", name, err)
	}
	defer func() {
		if rerr := os.RemoveAll(scratch); rerr != nil && err == nil {
			err = fmt.Errorf("remove the smoke command's scratch directory: %w", rerr)
		}
	}()
	if err := os.Chmod(scratch, 0o755); err != nil {
		return fmt.Errorf("prepare smoke command %q: %w", name, err)
	}
	o.DataDir, o.StateDir = filepath.Join(scratch, "data"), filepath.Join(scratch, "state")
	if o.Port, err = freePort(o.Listen); err != nil {
		return fmt.Errorf("prepare smoke command %q: %w", name, err)
	}
	o.HostPort = o.Port
	spec, err := PrepareCommand(o, inst, argv)
	if err != nil {
		return fmt.Errorf("prepare smoke command %q: %w", name, err)
	}
	// The env file comes after hbx's settings: its PORT or
	// EXECUTOR_DATA_DIR would name the live ones.
	spec.SetEnv("EXECUTOR_HOST", o.Listen)
	spec.SetEnv("PORT", strconv.Itoa(o.Port))
	spec.SetEnv("EXECUTOR_DATA_DIR", o.DataDir)
	return Smoke(ctx, spec, timeout)
}

// freePort returns a TCP port free on the address listen now.
func freePort(listen string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(listen, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// smokeOutputMax bounds how much of a smoke command's output is kept.
const smokeOutputMax = 64 << 10

// Smoke runs spec (from PrepareCommand) to completion in its own process
// group, as spec.Credential, with no stdin, bounded by timeout (0: no
// bound). When the bound passes, the whole group is killed and the error
// says "smoke command "ARGV" did not finish within D"; a non-zero exit says
// "smoke command "ARGV" exited N: <first line of its output>". Whatever the
// command left running is killed when it returns: its process group, and
// any process that left the group (setsid, a daemon) but still holds the
// marker, the read end of a pipe every process of the command inherits
// after spec.ExtraFiles. Not guaranteed: a process that left the group and
// closed every descriptor it inherited is not found. When ctx
// ends first, the error wraps ctx's error: it says nothing about the
// release.
func Smoke(ctx context.Context, spec *Spec, timeout time.Duration) error {
	name := fmt.Sprintf("smoke command %q", strings.Join(spec.Args, " "))
	parent := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	mk, err := newMarker()
	if err != nil {
		return fmt.Errorf("run %s: %w", name, err)
	}
	var out limitedBuffer
	cmd := exec.Command(spec.Path)
	cmd.ExtraFiles = append(append([]*os.File(nil), spec.ExtraFiles...), mk.r)
	cmd.Args = spec.Args
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: spec.Credential, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	mk.started()
	if err == nil {
		// What it left behind in its group is killed before its leader
		// is reaped (group.wait); at the timeout, the whole group.
		g := &group{pid: cmd.Process.Pid}
		done := make(chan error, 1)
		go func() { done <- g.wait(cmd) }()
		select {
		case err = <-done:
		case <-ctx.Done():
			g.signal(syscall.SIGKILL)
			err = <-done
		}
	}
	// What left the group but still holds the marker.
	if kerr := mk.kill(parent); kerr != nil && err == nil && parent.Err() == nil && ctx.Err() == nil {
		return fmt.Errorf("run %s: stop what it left running: %w", name, kerr)
	}
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("run %s: %w", name, perr)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s did not finish within %s", name, timeout)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		st := ee.Sys().(syscall.WaitStatus)
		what := fmt.Sprintf("exited %d", st.ExitStatus())
		if st.Signaled() {
			what = "was killed by " + st.Signal().String()
		}
		if line := firstLine(out.Bytes()); line != "" {
			return fmt.Errorf("%s %s: %s", name, what, line)
		}
		return fmt.Errorf("%s %s", name, what)
	}
	return fmt.Errorf("run %s: %w", name, err)
}

// firstLine is the first non-empty line of b, at most 200 bytes.
func firstLine(b []byte) string {
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 200 {
				l = l[:200]
			}
			return l
		}
	}
	return ""
}

// limitedBuffer keeps the first smokeOutputMax bytes written to it.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := smokeOutputMax - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
