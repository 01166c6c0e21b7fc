package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/internal/atomicfile"
)

// forwarded are the signals Run passes to the payload's process group.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// outputWaitDelay is how long Run waits, once the payload exited, for
// the processes it left to close its stdout and stderr.
const outputWaitDelay = 3 * time.Second

// ExitError carries the payload's exit status: its exit code, or 128+N
// when signal N ended it (the shell's convention).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("executor exited with status %d", e.Code) }

// Run starts spec in its own process group, writes the pidfile, forwards
// signals to the group, and waits. When ctx ends first, the group gets
// SIGTERM, and SIGKILL spec.KillAfter later when that is set. When the
// payload's process (the group's leader) exits, what it left in its group
// is killed before the leader is reaped (so the kill cannot reach another
// group that took the id), and then any process that left the group
// (setsid, a daemon) but holds the marker pipe inherited after
// spec.ExtraFiles. A process outside the group that still holds stdout
// or stderr delays Run by outputWaitDelay (3 s) at most, never more. A
// non-zero exit is an *ExitError.
func Run(ctx context.Context, spec *Spec, stdout, stderr io.Writer, log *slog.Logger) error {
	cmd := &exec.Cmd{
		Path:   spec.Path,
		Args:   spec.Args,
		Dir:    spec.Dir,
		Env:    spec.Env,
		Stdout: stdout,
		Stderr: stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:    true,
			Credential: spec.Credential,
			Pdeathsig:  syscall.SIGTERM,
		},
		// A process the payload left (a child in its group, one in a
		// session of its own) may still hold its stdout or stderr: Wait
		// gives the copy this long after the payload's exit, then closes
		// the pipes, so Run returns and kills what is left.
		WaitDelay: outputWaitDelay,
	}
	if spec.Cgroup != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(spec.Cgroup.Fd())
	}
	mk, err := newMarker()
	if err != nil {
		return fmt.Errorf("start %s: %w", spec.Args[0], err)
	}
	cmd.ExtraFiles = append(append([]*os.File(nil), spec.ExtraFiles...), mk.r)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	err = cmd.Start()
	mk.started()
	if err != nil {
		mk.w.Close()
		return fmt.Errorf("start %s: %w", spec.Args[0], err)
	}
	pid := cmd.Process.Pid
	if err := atomicfile.WriteFile(spec.PidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		log.Warn("write pidfile", "err", err)
	}
	defer os.Remove(spec.PidFile)
	log.Info("executor started", "pid", pid, "program", spec.Path, "dir", spec.Dir)
	// Whatever the leader left in its group goes with it (group.wait),
	// and what left the group (setsid, a daemon) but holds the marker.
	termSent, err := forwardUntilExit(ctx, cmd, sigs, spec.KillAfter)
	if kerr := mk.kill(context.Background()); kerr != nil {
		log.Warn("stop what the payload left running", "err", kerr)
	}
	return exitStatus(err, termSent, log)
}

// forwardUntilExit waits for the started cmd (group.wait: what its
// leader leaves in its group is killed before the leader is reaped),
// passing each signal of sigs to its process group and SIGTERM once when
// ctx ends, then SIGKILL killAfter later when that is not zero; termSent
// says a SIGTERM or SIGINT was passed.
func forwardUntilExit(ctx context.Context, cmd *exec.Cmd, sigs <-chan os.Signal, killAfter time.Duration) (termSent bool, err error) {
	g := &group{pid: cmd.Process.Pid}
	done := make(chan error, 1)
	go func() { done <- g.wait(cmd) }()
	var kill <-chan time.Time
	for {
		select {
		case s := <-sigs:
			sig := s.(syscall.Signal)
			termSent = termSent || sig == syscall.SIGTERM || sig == syscall.SIGINT
			g.signal(sig)
		case <-ctx.Done():
			if !termSent {
				termSent = true
				g.signal(syscall.SIGTERM)
			}
			if killAfter > 0 {
				t := time.NewTimer(killAfter)
				defer t.Stop()
				kill = t.C
			}
			ctx = context.Background() // stop selecting on it
		case <-kill:
			g.signal(syscall.SIGKILL)
			kill = nil
		case err = <-done:
			return termSent, err
		}
	}
}

// exitStatus maps the payload's end (err of Wait) to Run's result: nil
// for exit 0, or for a SIGTERM or SIGINT hbx passed (termSent); an
// *ExitError with the exit code or 128+N for signal N otherwise.
func exitStatus(err error, termSent bool, log *slog.Logger) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		st := ee.Sys().(syscall.WaitStatus)
		code := st.ExitStatus()
		if st.Signaled() {
			code = 128 + int(st.Signal())
			if termSent && (st.Signal() == syscall.SIGTERM || st.Signal() == syscall.SIGINT) {
				log.Info("executor stopped", "signal", st.Signal().String())
				return nil
			}
		}
		return &ExitError{Code: code}
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		// Exit 0, but a process it left held its output past
		// outputWaitDelay (Run kills it next).
		log.Warn("executor exited; a process it left still held its output", "status", 0, "waited", outputWaitDelay)
		return nil
	}
	if err != nil {
		return fmt.Errorf("wait for executor: %w", err)
	}
	log.Info("executor exited", "status", 0)
	return nil
}
