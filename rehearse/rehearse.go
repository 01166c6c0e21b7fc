package rehearse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/release"
)

// ErrRefused: the release crashed, never became ready or failed a check
// on the copy of the data; the error says which and quotes its last
// output lines.
var ErrRefused = errors.New("the release failed its rehearsal")

// Defaults of Options.
const (
	DefaultAttempts  = 5
	DefaultStopGrace = 10 * time.Second
	DefaultWait      = 2 * time.Minute
)

// Options say what to rehearse and how the real start would run it.
type Options struct {
	// DataDir is the live data directory (absolute); it is only read.
	DataDir string
	// Release is the staged release to boot.
	Release *release.Installed
	// Launch is how the real start runs the payload (the configuration's
	// launch options); Run replaces its data and state directories, its
	// listen address (Listen), port and host port.
	Launch launch.Options
	// Listen is the loopback address the rehearsal listens on.
	Listen string
	// Health are the options of the real start's checks (key, tool set
	// pinned with Release, timeout); Run points them at the rehearsal's
	// address and port, without a supervisor or a data directory.
	Health health.Options
	// Readiness names the readiness check (health.readiness), Checks the
	// checks that must pass once it is ready (health.Names).
	Readiness string
	Checks    []string
	// Wait bounds the wait for readiness (DefaultWait when 0); StopGrace
	// how long the payload has between SIGTERM and SIGKILL
	// (DefaultStopGrace when 0).
	Wait, StopGrace time.Duration
	// Attempts is how many copies are tried while the data is live
	// (DefaultAttempts when 0).
	Attempts int
	// Hold, when not nil, stops the programs until the func it returns is
	// called: the fallback copy when the data never holds still.
	Hold func(ctx context.Context) (func() error, error)
	// Hint, when not nil, may add to a refusal's reason a hint about the
	// cause of a failing check ("; pin it with ..."); "" adds nothing.
	Hint func(cause error) string
	// Cgroups runs the payload in a cgroup of its own where a writable
	// cgroup v2 hierarchy is mounted (cgroup.go); where none is, one log
	// line says so and its process group, launch's marker and the held
	// file alone find its processes.
	Cgroups bool
	// Logger receives what Run does; nil discards.
	Logger *slog.Logger
}

// Result says what a rehearsal did and how long each part took.
type Result struct {
	Leftovers []string // earlier scratch directories removed
	Attempts  int      // copies made while the data was live
	Copied    Copied
	Copy      time.Duration // the copies, verification included
	Held      time.Duration // the programs held stopped for the copy (0: never)
	Boot      time.Duration // start until ready and checked
	Port      int           // the scratch port
	Total     time.Duration
}

func (o *Options) defaults() {
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	if o.StopGrace <= 0 {
		o.StopGrace = DefaultStopGrace
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Run rehearses o.Release on a copy of o.DataDir; see the package doc.
// Errors: ErrRefused (the release would not come up), ErrUnsteady, or
// what kept the rehearsal from running (a copy, a port, ctx).
func Run(ctx context.Context, o Options) (res *Result, err error) {
	o.defaults()
	start := time.Now()
	res = &Result{}
	// Refused before anything is removed, made or copied.
	if err := o.checkEnvDataDir(); err != nil {
		return nil, err
	}
	// Held until the scratch directory is gone: every scratch directory
	// found while it is held is a killed rehearsal's, never a running
	// one's (a second copy of hbx rehearsing the same data waits its
	// turn: refused, naming the holder).
	l, err := lock.Acquire(ctx, datadir.RehearsalLock(o.DataDir), "hbx upgrade (rehearsal)", 0, nil)
	if lock.IsLocked(err) {
		return nil, fmt.Errorf("another rehearsal of %s is running: %w", o.DataDir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("take the rehearsal lock of %s: %w", o.DataDir, err)
	}
	defer l.Unlock()
	var left []string
	if res.Leftovers, left, err = removeLeftovers(ctx, o.DataDir, o.Logger); err != nil {
		return nil, err
	}
	for _, p := range res.Leftovers {
		o.Logger.Warn("removed what an interrupted rehearsal left", "dir", p)
	}
	for _, p := range left {
		o.Logger.Warn("left alone: named like a rehearsal's scratch directory, without the held file hbx makes in one", "dir", p, "held", HeldFile)
	}
	s, err := newScratch(o.DataDir)
	if err != nil {
		return nil, err
	}
	// Named before anything is copied: a kill -9 from here on leaves it
	// for the next rehearsal to remove, and this line says where.
	o.Logger.Info("copying the data for the rehearsal", "scratch", s.dir)
	defer func() {
		if rerr := s.remove(ctx); rerr != nil && err == nil {
			err = fmt.Errorf("remove the rehearsal's scratch directory: %w", rerr)
		}
	}()
	var g *cgroup
	if o.Cgroups {
		// Made and recorded while the scratch directory is still hbx's.
		g = o.openCgroup(ctx, s)
		defer func() {
			if rerr := g.remove(); rerr != nil && err == nil {
				err = fmt.Errorf("remove the rehearsal's cgroup: %w", rerr)
			}
		}()
	}
	if err := o.copyData(ctx, s, res); err != nil {
		return nil, err
	}
	if err := s.own(o.DataDir); err != nil {
		return nil, fmt.Errorf("give the scratch directory to the data's owner: %w", err)
	}
	if err := o.boot(ctx, s, g, res); err != nil {
		return nil, err
	}
	res.Total = time.Since(start)
	return res, nil
}

// copyData copies the data into s: live first, up to o.Attempts times,
// then under o.Hold when the data never held still.
func (o *Options) copyData(ctx context.Context, s *scratch, res *Result) error {
	if err := checkRoom(o.DataDir, s.dir); err != nil {
		return err
	}
	for res.Attempts < o.Attempts {
		res.Attempts++
		t0 := time.Now()
		c, steady, err := snapshot(o.DataDir, s.data())
		res.Copy += time.Since(t0)
		if err != nil {
			return err
		}
		if steady {
			res.Copied = c
			o.Logger.Info("data copied for the rehearsal", "files", c.Files, "bytes", c.Bytes, "attempts", res.Attempts, "took", res.Copy)
			return nil
		}
		if err := datadir.RemoveTree(s.data()); err != nil {
			return err
		}
	}
	if o.Hold == nil {
		return fmt.Errorf("%w (%d copies)", ErrUnsteady, res.Attempts)
	}
	o.Logger.Info("the data kept changing; holding the programs stopped for one copy", "attempts", res.Attempts)
	t0 := time.Now()
	release, err := o.Hold(ctx)
	if err != nil {
		return fmt.Errorf("hold the programs for the rehearsal's copy: %w", err)
	}
	c, _, err := snapshot(o.DataDir, s.data())
	rerr := release()
	res.Held = time.Since(t0)
	res.Copy += res.Held
	res.Copied = c
	if err != nil {
		return err
	}
	if rerr != nil {
		return fmt.Errorf("start the programs after the rehearsal's copy: %w", rerr)
	}
	o.Logger.Info("data copied for the rehearsal under a hold", "files", c.Files, "bytes", c.Bytes, "held", res.Held)
	return nil
}

// freePort returns a TCP port the OS finds free on listen now.
func freePort(listen string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(listen, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", listen, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// refusal is ErrRefused with what failed, the payload's last lines and
// the failing checks' causes (a *health.ToolsError among them says which
// tools the release lists).
type refusal struct {
	msg    string
	causes []error
}

func (r *refusal) Error() string { return r.msg }

// Unwrap returns ErrRefused and the causes.
func (r *refusal) Unwrap() []error { return append([]error{ErrRefused}, r.causes...) }

// refused is ErrRefused for what happened, with the last lines of out.
// causes never hold a launch *ExitError: hbx would exit with its code.
func refused(what string, out *tail, causes ...error) error {
	lines := out.String()
	msg := fmt.Sprintf("%s: %s on a copy of the data; it wrote nothing", ErrRefused, what)
	if lines != "" {
		last := "its last line"
		if n := strings.Count(lines, "\n") + 1; n > 1 {
			last = fmt.Sprintf("its last %d lines", n)
		}
		msg = fmt.Sprintf("%s: %s on a copy of the data; %s:\n  %s",
			ErrRefused, what, last, strings.ReplaceAll(lines, "\n", "\n  "))
	}
	return &refusal{msg: msg, causes: causes}
}
