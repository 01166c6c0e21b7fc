package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/names"
	"github.com/hermesbox/hbx/internal/supervision"
)

// Sentinel errors. Errors that carry a program name wrap one of these.
var (
	// ErrInvalid: a Program or Options value breaks a rule (New); also an
	// unknown or unusable user.
	ErrInvalid = errors.New("invalid program")
	// ErrUnknownProgram: a name that is not a configured program.
	ErrUnknownProgram = errors.New("no such program")
	// ErrNoRetry marks an Options.Install error that retrying cannot
	// help (a bad configuration): the install program is FATAL at once.
	// See NoRetry.
	ErrNoRetry = errors.New("retrying cannot help")
	// ErrNotRunning: no supervisor answers on the socket.
	ErrNotRunning = errors.New("no supervisor is running")
	// ErrAlreadyRunning: another live supervisor owns the socket.
	ErrAlreadyRunning = errors.New("another supervisor is running")
	// ErrHeld: the program is stopped by a hold and cannot be started
	// until the hold ends.
	ErrHeld = errors.New("program is held")
	// ErrShuttingDown: the supervisor is stopping everything and refuses
	// new starts.
	ErrShuttingDown = errors.New("supervisor is shutting down")
	// ErrStartFailed: a start ended FATAL, or the program was stopped
	// before it became RUNNING.
	ErrStartFailed = errors.New("start failed")
	// ErrFatal: a program a wait needs RUNNING is FATAL (WaitRunning);
	// the vocabulary's sentinel, so verbs can test for it.
	ErrFatal = supervision.ErrFatal
	// ErrRefused: a Restart or Start that a program's Check refused;
	// nothing was stopped or started (RefusedError).
	ErrRefused = errors.New("restart refused")
	// ErrLogNotRegular: a program's log path names a symbolic link, FIFO,
	// socket, device or directory, which the supervisor (root) never
	// opens for writing (openLog).
	ErrLogNotRegular = errors.New("log is not a regular file")
)

// Autorestart says when a program that exited from RUNNING is started
// again (supervisord's autorestart).
type Autorestart string

// Autorestart values.
const (
	AutorestartTrue       Autorestart = "true"       // always
	AutorestartFalse      Autorestart = "false"      // never
	AutorestartUnexpected Autorestart = "unexpected" // when the exit code is not in ExitCodes
)

// Command is a prepared program start: execute Path with Args (Args[0] is
// the program name) in Dir with Env, as Credential when not nil.
type Command struct {
	Path       string
	Args       []string
	Dir        string
	Env        []string
	Credential *syscall.Credential
}

// Probe checks a program's health. Check returns nil when the program is
// healthy; it must honour ctx's deadline. The supervisor calls it from its
// own goroutines, one call at a time per program.
type Probe interface {
	Check(ctx context.Context) error
}

// ProbeFunc adapts a function to Probe.
type ProbeFunc func(ctx context.Context) error

// Check calls f.
func (f ProbeFunc) Check(ctx context.Context) error { return f(ctx) }

// ProcessProbe is a Probe that is told the pid of the process it checks
// (the program's process-group leader, the one the supervisor spawned):
// the supervisor calls CheckProcess instead of Check when a Program's
// Probe implements it.
type ProcessProbe interface {
	Probe
	CheckProcess(ctx context.Context, pid int) error
}

// ProcessProbeFunc adapts a function to ProcessProbe; its Check (called by
// none but a caller without a pid) passes pid 0.
type ProcessProbeFunc func(ctx context.Context, pid int) error

// Check calls f with pid 0.
func (f ProcessProbeFunc) Check(ctx context.Context) error { return f(ctx, 0) }

// CheckProcess calls f.
func (f ProcessProbeFunc) CheckProcess(ctx context.Context, pid int) error { return f(ctx, pid) }

// LogFile is where one output stream of a program goes.
type LogFile struct {
	// Path is the absolute log file; its directory is created 0755.
	Path string
	// MaxBytes rotates the file when it would grow past this size; 0
	// never rotates. Rounded up to whole MiB (lumberjack's unit).
	MaxBytes int64
	// Backups is how many rotated files to keep; 0 keeps all.
	Backups int
}

// Program describes one supervised program. Durations stand for
// supervisord's integer seconds.
type Program struct {
	// Name identifies the program in the API and the CLI: lowercase
	// letters, digits, '-' and '_', not "all".
	Name string
	// Command is the argv; Command[0] without a slash is looked up on the
	// PATH of the program's environment. Ignored when Build is set.
	Command []string
	// Build, when set, prepares the command afresh at every start (so a
	// restart picks up the active release). Its error makes the program
	// FATAL with the error as the reason.
	Build func(ctx context.Context) (*Command, error)
	// User is the user name or uid the program runs as; "" runs as the
	// supervisor's user. Another user needs root. Ignored with Build.
	User string
	// Directory is the working directory; "" keeps the supervisor's.
	// Ignored with Build.
	Directory string
	// Environment holds KEY=VALUE entries added to Options.Env. Ignored
	// with Build.
	Environment []string
	// Priority orders starts (ascending) and stops (descending).
	Priority int
	// Autostart starts the program when the supervisor starts.
	Autostart bool
	// Autorestart: see the type. "" means AutorestartUnexpected.
	Autorestart Autorestart
	// ExitCodes are the expected exit codes for AutorestartUnexpected; nil
	// means {0}. A program killed by a signal exited unexpectedly.
	ExitCodes []int
	// RestartExitCodes are exit codes that ask for a restart now (0-255;
	// systemd's RestartForceExitStatus): the program is started again at
	// once, without a backoff and without counting a failed start,
	// whatever Autorestart says. Hermes exits 75 for a graceful restart.
	RestartExitCodes []int
	// FatalExitCodes are exit codes after which starting again cannot
	// help (0-255; systemd's RestartPreventExitStatus): the program is
	// FATAL at once, the code and its last stderr line in the reason.
	// Hermes exits 78 on a fatal configuration. An exit that follows the
	// supervisor's own stop is expected whatever its code, in any class.
	FatalExitCodes []int
	// StartSecs is how long the program must stay up to count as started.
	StartSecs time.Duration
	// StartRetries is how many failed starts are retried before FATAL.
	StartRetries int
	// StopSignal goes to the process group first; 0 means SIGTERM.
	StopSignal syscall.Signal
	// StopWait is how long to wait after StopSignal before SIGKILL.
	StopWait time.Duration
	// DependsOn names programs that must be RUNNING before this one starts.
	DependsOn []string
	// Stdout and Stderr are the program's log files.
	Stdout, Stderr LogFile
	// OwnLog is a log file the program writes itself (absolute; "" for
	// none): Logs follows it with LogsRequest.File. The supervisor only
	// reads it, and refuses a symbolic link or a file that is not regular
	// there.
	OwnLog string
	// Check, when set, is a preflight that Restart runs before it stops
	// the program, and Start before it starts a program that is not
	// running: its error refuses this program (a *RefusedError; the other
	// programs named go on), nothing is stopped or started and a running
	// program keeps running, as `nginx -t` before a reload. It must have no side effects (read only: no
	// directory, user or owner made or changed) and honour ctx; it is
	// called from the goroutine of the request, outside the program's
	// loop.
	Check func(ctx context.Context) error
	// Probe, when set, gates RUNNING on a healthy answer; while RUNNING it
	// runs every HealthInterval, its failure is said in Status.Unhealthy,
	// and it detects a wedged program (alive, but failing WedgeFailures
	// probes in a row).
	Probe Probe
	// HealthWait is the longest a start waits for the first healthy probe
	// before it counts as failed; 0 means 60s.
	HealthWait time.Duration
	// HealthInterval is the period of probes while RUNNING; 0 means 5s.
	HealthInterval time.Duration
	// WedgeFailures failed probes in a row restart a RUNNING program; 0
	// disables wedge detection (the failures are only said in Status).
	WedgeFailures int
	// ExtraFiles are inherited by every process of the program, after
	// stdin, stdout, stderr and the marker (Options.StateDir): fd 4 on,
	// or fd 3 on without a marker. hbx gives Executor its data
	// directory's lock this way, so the lock is held while any of its
	// processes lives. The supervisor never closes them.
	ExtraFiles []*os.File
}

// RefusedError is the error of a Restart or Start that the Check of
// program Name refused with Err: nothing was stopped or started.
// errors.Is(err, ErrRefused) is true, and Unwrap gives Err.
type RefusedError struct {
	Verb string // "restart" or "start"; "" is "restart"
	Name string
	Err  error
}

// Error says "restart NAME: ERR; nothing stopped" or "start NAME: ERR;
// nothing started".
func (e *RefusedError) Error() string {
	verb := e.Verb
	if verb == "" {
		verb = "restart"
	}
	return verb + " " + e.Name + ": " + e.Err.Error() + "; " + e.nothing()
}

// nothing says what the refusal left undone.
func (e *RefusedError) nothing() string {
	if e.Verb == "start" {
		return "nothing started"
	}
	return "nothing stopped"
}

// Unwrap returns Err.
func (e *RefusedError) Unwrap() error { return e.Err }

// Is matches ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// exitExpected reports whether code is one of p's expected exit codes.
func (p *Program) exitExpected(code int) bool {
	if p.ExitCodes == nil {
		return code == 0
	}
	return slices.Contains(p.ExitCodes, code)
}

// checkPrograms returns one error per broken rule, each wrapping ErrInvalid.
func checkPrograms(progs []Program) []error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: program %q: %s", ErrInvalid, name, fmt.Sprintf(format, args...)))
	}
	byName := map[string]*Program{}
	for i := range progs {
		p := &progs[i]
		if !names.Program(p.Name) {
			bad(p.Name, "bad name (want lowercase letters, digits, '-' or '_', not \"all\")")
			continue
		}
		if byName[p.Name] != nil {
			bad(p.Name, "declared twice")
			continue
		}
		byName[p.Name] = p
		if p.Build == nil && len(p.Command) == 0 {
			bad(p.Name, "empty command")
		}
		switch p.Autorestart {
		case "", AutorestartTrue, AutorestartFalse, AutorestartUnexpected:
		default:
			bad(p.Name, "autorestart %q (want true, false or unexpected)", p.Autorestart)
		}
		for _, d := range []struct {
			what string
			d    time.Duration
		}{{"startsecs", p.StartSecs}, {"stopwaitsecs", p.StopWait}, {"health wait", p.HealthWait}, {"health interval", p.HealthInterval}} {
			if d.d < 0 {
				bad(p.Name, "negative %s %s", d.what, d.d)
			}
		}
		for _, code := range slices.Concat(p.ExitCodes, p.RestartExitCodes, p.FatalExitCodes) {
			if code < 0 || code > 255 {
				bad(p.Name, "exit code %d (want 0-255)", code)
			}
		}
		for _, code := range p.RestartExitCodes {
			if slices.Contains(p.FatalExitCodes, code) {
				bad(p.Name, "exit code %d is both a restart and a fatal exit code", code)
			}
		}
		if p.StartRetries < 0 || p.WedgeFailures < 0 {
			bad(p.Name, "negative startretries or wedge failures")
		}
		for _, lf := range []LogFile{p.Stdout, p.Stderr} {
			if lf.Path == "" || lf.Path[0] != '/' || lf.MaxBytes < 0 || lf.Backups < 0 {
				bad(p.Name, "bad log file %+v (want an absolute path, sizes not negative)", lf)
			}
		}
		if p.Build == nil {
			if _, err := lookupUser(p.User); err != nil {
				bad(p.Name, "%v", err)
			}
		}
	}
	for _, p := range byName {
		for _, d := range p.DependsOn {
			if byName[d] == nil {
				bad(p.Name, "depends on %q, which is not a program", d)
			}
		}
	}
	if cyc := findCycle(byName); cyc != nil {
		bad(cyc[0], "dependency cycle %s", strings.Join(cyc, " -> "))
	}
	return errs
}

// findCycle returns one dependency cycle as names (first == last), or nil.
func findCycle(byName map[string]*Program) []string {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var visit func(string) []string
	visit = func(n string) []string {
		color[n] = grey
		stack = append(stack, n)
		for _, d := range byName[n].DependsOn {
			if byName[d] == nil {
				continue
			}
			switch color[d] {
			case grey:
				i := slices.Index(stack, d)
				return append(slices.Clone(stack[i:]), d)
			case white:
				if c := visit(d); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return nil
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if color[n] == white {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

// lookupUser resolves a program's user; see account.Lookup.
func lookupUser(name string) (*syscall.Credential, error) { return account.Lookup(name) }

// NoRetry returns err (nil for nil) marked with ErrNoRetry, its message
// unchanged: an Options.Install error that is not retried.
func NoRetry(err error) error {
	if err == nil {
		return nil
	}
	return noRetryError{err}
}

// noRetryError is NoRetry's error.
type noRetryError struct{ error }

// Unwrap returns the error and ErrNoRetry.
func (e noRetryError) Unwrap() []error { return []error{e.error, ErrNoRetry} }
