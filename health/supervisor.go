package health

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hermesbox/hbx/internal/datalock"
	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/internal/regfile"
	"github.com/hermesbox/hbx/internal/supervision"
)

// ErrNoSupervisor is wrapped by a Supervisor's error when no supervisor
// runs; the supervisor check then skips and the listeners check falls
// back to the pidfile.
var ErrNoSupervisor = errors.New("no supervisor is running")

// ErrStarting is wrapped by the supervisor check's error when every
// program that is not RUNNING is STARTING or BACKOFF: the supervisor is
// still making progress (installing the release on start, starting or
// restarting a program), so a later run may pass. WaitStart retries on it.
var ErrStarting = errors.New("a supervised program is still starting")

// startingError is the supervisor check's error while every program that
// is not RUNNING is STARTING or BACKOFF; it is ErrStarting for errors.Is.
type startingError struct{ msg string }

func (e startingError) Error() string        { return e.msg }
func (e startingError) Is(target error) bool { return target == ErrStarting }

// ErrFatal is wrapped by the supervisor check's error when a program is
// FATAL: the supervisor gave up on it and starts it again only when asked
// (hbx start), so no later run passes by waiting; Wait and WaitStart stop
// at once on it. It is supervision.ErrFatal, the error of the
// supervisor's own wait for RUNNING.
var ErrFatal = supervision.ErrFatal

// fatalError is the supervisor check's error when a program is FATAL; it
// is ErrFatal for errors.Is.
type fatalError struct{ msg string }

func (e fatalError) Error() string        { return e.msg }
func (e fatalError) Is(target error) bool { return target == ErrFatal }

// Supervisor is the running supervisor's view of its programs, as the
// checks need it. The composer adapts the supervisor's control client to it.
type Supervisor interface {
	// Programs returns every supervised program. When no supervisor runs
	// the error wraps ErrNoSupervisor.
	Programs(ctx context.Context) ([]Program, error)
}

// Program is one supervised program as the supervisor reports it.
type Program struct {
	Name   string
	State  supervision.State // RUNNING, STOPPED, FATAL, ... (internal/supervision)
	PID    int               // the leader's pid; 0 when none runs
	Detail string            // the supervisor's description, e.g. the exit reason
	// Unhealthy is, for a RUNNING program, why its last liveness probe
	// failed (Hermes: its state file stale or not "running"); "" when
	// it passed or the program has none.
	Unhealthy string
}

// checkPrograms is check supervisor: every program the supervisor runs,
// and every one of want (the enabled programs of the configuration), is
// RUNNING, and live (no failure in Unhealthy). Its error is ErrStarting
// while every other program is STARTING or BACKOFF, ErrFatal when one is
// FATAL.
func checkPrograms(progs []Program, want []string) (string, error) {
	var bad, good []string
	starting, fatal := true, false
	for _, p := range progs {
		if p.State != supervision.Running {
			starting = starting && (p.State == supervision.Starting || p.State == supervision.Backoff)
			fatal = fatal || p.State == supervision.Fatal
			s := p.Name + " " + p.State.String()
			if p.Detail != "" {
				s += " (" + p.Detail + ")"
			}
			bad = append(bad, s)
			continue
		}
		if p.Unhealthy != "" {
			bad = append(bad, fmt.Sprintf("%s RUNNING pid %d but not live: %s", p.Name, p.PID, p.Unhealthy))
			starting = false // not progress: waiting would not mend it
			continue
		}
		good = append(good, fmt.Sprintf("%s RUNNING pid %d", p.Name, p.PID))
	}
	for _, w := range want {
		if !slices.ContainsFunc(progs, func(p Program) bool { return p.Name == w }) {
			bad = append(bad, w+" is configured but not supervised (the supervisor was started with another configuration?)")
			starting = false
		}
	}
	switch {
	case len(bad) > 0 && starting:
		return "", startingError{strings.Join(bad, "; ")}
	case len(bad) > 0 && fatal:
		return "", fatalError{strings.Join(bad, "; ")}
	}
	if len(bad) > 0 {
		return "", errors.New(strings.Join(bad, "; "))
	}
	if len(good) == 0 {
		return "", errors.New("the supervisor runs no program")
	}
	return strings.Join(good, ", "), nil
}

// executorPID finds the pid of the executor's process tree: from the
// supervisor when one runs, else from the pidfile of `hbx run executor`.
// It returns the pid and where it came from.
func executorPID(ctx context.Context, o *Options) (int, string, error) {
	if o.Supervisor != nil {
		progs, err := o.Supervisor.Programs(ctx)
		switch {
		case err == nil:
			i := slices.IndexFunc(progs, func(p Program) bool { return p.Name == o.ExecutorProgram })
			if i < 0 {
				return 0, "", fmt.Errorf("the supervisor runs no program %q", o.ExecutorProgram)
			}
			p := progs[i]
			if p.PID == 0 {
				d := ""
				if p.Detail != "" {
					d = " (" + p.Detail + ")"
				}
				return 0, "", fmt.Errorf("%s is not running: %s under the supervisor%s", p.Name, p.State, d)
			}
			return p.PID, "the supervisor", nil
		case !errors.Is(err, ErrNoSupervisor):
			return 0, "", err
		}
	}
	if o.PidFile == "" {
		return 0, "", errors.New("executor is not running: no supervisor answers and no pidfile is known")
	}
	// The state directory is the payload's: its pidfile may be anything
	// (a FIFO, a link to /dev/zero or to a secret); read a small regular
	// file only, never through a link, and never quote what is not a pid.
	b, err := regfile.ReadFileNoFollow(o.PidFile, 64)
	if errors.Is(err, os.ErrNotExist) {
		return 0, "", fmt.Errorf("executor is not running: no supervisor answers and there is no pidfile %s", o.PidFile)
	}
	if err != nil {
		return 0, "", fmt.Errorf("read pidfile: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, "", fmt.Errorf("pidfile %s does not hold a pid (%d bytes)", o.PidFile, len(b))
	}
	if _, err := os.Stat(filepath.Join(procRoot, strconv.Itoa(pid))); err != nil {
		return 0, "", fmt.Errorf("executor is not running: pidfile %s names pid %d, which is gone", o.PidFile, pid)
	}
	// `hbx run executor` hands its payload the data directory's lock: a
	// pid that does not hold it is a stale pidfile's reused pid, or one
	// the payload wrote to name another process.
	if o.DataDir != "" {
		if err := holdsDataLock(o, pid); err != nil {
			return 0, "", err
		}
	}
	return pid, "pidfile " + o.PidFile, nil
}

// holdsDataLock fails unless pid (named by the pidfile) holds the data
// directory's lock open.
func holdsDataLock(o *Options, pid int) error {
	lp := datalock.Path(o.DataDir)
	pin, err := procscan.PinPath(lp)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("executor is not running: pidfile %s names pid %d, but there is no data lock %s", o.PidFile, pid, lp)
	}
	if err != nil {
		return fmt.Errorf("read the data lock: %w", err)
	}
	defer pin.Close()
	if !procscan.Holds(pid, pin) {
		return fmt.Errorf("executor is not running: pidfile %s names pid %d, which does not hold the data lock %s (a stale pidfile, or not the payload hbx run executor started)", o.PidFile, pid, lp)
	}
	return nil
}
