package rehearse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/killpoint"
	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/internal/regfile"
	"github.com/hermesbox/hbx/launch"
)

// pollInterval is how often the readiness gate is tried.
const pollInterval = 250 * time.Millisecond

// proc is the rehearsed payload, run by launch.Run in a goroutine.
type proc struct {
	pidFile string
	held    *procscan.Pin // the scratch's held file, which the payload inherits
	pid     atomic.Int64
	done    chan struct{}
	err     error // launch.Run's, once done is closed
}

// readPid returns the payload's pid from its pidfile (0 until written).
// The pidfile is in the payload's state directory: a pid that does not
// hold the scratch's held file is not the payload's, and is never
// signalled nor probed.
func (p *proc) readPid() int {
	if pid := p.pid.Load(); pid > 0 {
		return int(pid)
	}
	b, err := regfile.ReadFileNoFollow(p.pidFile, 64)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !procscan.Holds(pid, p.held) {
		return 0
	}
	p.pid.Store(int64(pid))
	return pid
}

// exited says how the payload ended, never wrapping launch's
// *ExitError (whose code hbx would exit with).
func (p *proc) exited() string {
	var xe *launch.ExitError
	switch {
	case p.err == nil:
		return "it exited with status 0 before it was ready"
	case errors.As(p.err, &xe):
		return fmt.Sprintf("it exited with status %d before it was ready", xe.Code)
	}
	return "it did not start: " + p.err.Error()
}

// boot starts o.Release on s's copy on a free loopback port, waits until
// it is ready and checked, and stops it whatever happened.
func (o *Options) boot(ctx context.Context, s *scratch, g *cgroup, res *Result) (err error) {
	lo := o.Launch
	lo.DataDir, lo.StateDir, lo.Listen = s.data(), s.state(), o.Listen
	if res.Port, err = freePort(o.Listen); err != nil {
		return err
	}
	lo.Port, lo.HostPort = res.Port, res.Port
	spec, err := launch.PrepareCommand(lo, o.Release, o.Release.Meta.Config.Argv())
	if err != nil {
		return fmt.Errorf("prepare the rehearsal: %w", err)
	}
	moves := [][2]string{{o.DataDir, lo.DataDir}, {o.Launch.StateDir, lo.StateDir}}
	if spec.Env, err = onTheCopy(spec.Env, moves); err != nil {
		return fmt.Errorf("prepare the rehearsal: %w", err)
	}
	// The env file comes after hbx's settings: its PORT (the live port,
	// harmless for the real start) or EXECUTOR_HOST would have the
	// rehearsal meet the running payload's port, or listen off loopback.
	spec.SetEnv("EXECUTOR_HOST", lo.Listen)
	spec.SetEnv("PORT", strconv.Itoa(res.Port))
	spec.ExtraFiles = []*os.File{s.held}
	spec.KillAfter = o.StopGrace // stop's SIGKILL, sent by launch.Run while it holds the group's id
	if g != nil {
		spec.Cgroup = g.dir
	}
	pin, err := procscan.PinFile(s.held)
	if err != nil {
		return fmt.Errorf("prepare the rehearsal: %w", err)
	}
	defer pin.Close()
	out := &tail{}
	p := &proc{pidFile: spec.PidFile, held: pin, done: make(chan struct{})}
	// The payload is stopped here, not by ctx: Ctrl-C still stops it
	// (deferred below) and removes the scratch directory.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t0 := time.Now()
	o.Logger.Info("rehearsing the release on a copy of the data", "image", o.Release.Meta.Image, "manifest", o.Release.Meta.ManifestDigest, "port", res.Port)
	go func() {
		defer close(p.done)
		p.err = launch.Run(runCtx, spec, out, out, slog.New(slog.DiscardHandler))
		if spec.Cgroup != nil && errors.Is(p.err, syscall.ENOSYS) {
			// No clone3 (qemu-user, old seccomp filters): start it without
			// the cgroup, which stays empty.
			o.Logger.Warn("the rehearsal runs without a cgroup: starting a process into one fails here; its processes are found by process group, marker and held file alone", "err", p.err)
			spec.Cgroup = nil
			p.err = launch.Run(runCtx, spec, out, out, slog.New(slog.DiscardHandler))
		}
	}()
	defer func() {
		if serr := o.stop(cancel, p, g); serr != nil && err == nil {
			err = serr
		}
	}()
	if err := o.waitReady(ctx, p, res.Port, out); err != nil {
		return err
	}
	res.Boot = time.Since(t0)
	o.Logger.Info("the release passed its rehearsal", "image", o.Release.Meta.Image, "took", res.Boot)
	killpoint.Hold(killpoint.RehearsalReady)
	killpoint.At(killpoint.RehearsalReady)
	return nil
}

// onTheCopy returns the payload's environment env pointed at the
// rehearsal's copies: the env file comes after hbx's settings
// (docs/payload.md), and a value in it that names the live data or state
// directory, or a path inside one (EXECUTOR_DATA_DIR=<executor.data_dir>,
// harmless for the real start), would have the rehearsal write the live
// data beside the running release; such a value names the same path in
// the copy (moves maps live directory to copy). An EXECUTOR_DATA_DIR
// naming another directory is an error: that directory was not copied.
func onTheCopy(env []string, moves [][2]string) ([]string, error) {
	out := slices.Clone(env)
	for i, kv := range out {
		k, v, _ := strings.Cut(kv, "=")
		if slices.ContainsFunc(moves, func(m [2]string) bool { _, ok := inside(v, m[1]); return ok }) {
			continue // already the copy's (which may lie below the live state directory)
		}
		moved := false
		for _, m := range moves {
			if rel, ok := inside(v, m[0]); ok {
				out[i], moved = k+"="+filepath.Join(m[1], rel), true
				break
			}
		}
		if k == "EXECUTOR_DATA_DIR" && !moved && v != moves[0][1] {
			return nil, fmt.Errorf("the environment (executor.env_file) sets EXECUTOR_DATA_DIR=%q, not executor.data_dir %s: a rehearsal copies only executor.data_dir (remove the line, or skip the rehearsal with --no-rehearsal)", v, moves[0][0])
		}
	}
	return out, nil
}

// checkEnvDataDir refuses, before anything is copied, a rehearsal whose
// payload environment would name another data directory than
// o.DataDir: the EXECUTOR_DATA_DIR the env file (executor.env_file) or
// Launch.ExtraEnv sets last (hbx's own setting replaces the image's),
// with the error onTheCopy gives at the start. A bad env file is the
// error the start would give.
func (o *Options) checkEnvDataDir() error {
	fileEnv, err := launch.ReadEnvFile(o.Launch.EnvFile)
	if err != nil {
		return fmt.Errorf("prepare the rehearsal: %w", err)
	}
	v, ok := "", false
	for _, kv := range append(slices.Clone(o.Launch.ExtraEnv), fileEnv...) {
		if k, val, _ := strings.Cut(kv, "="); k == "EXECUTOR_DATA_DIR" {
			v, ok = val, true
		}
	}
	if !ok {
		return nil
	}
	// The copy's path is not known yet: none of the env file's values is
	// it (a random name), so any stand-in that is no path serves.
	moves := [][2]string{{o.DataDir, "\x00copy"}, {o.Launch.StateDir, "\x00state"}}
	if _, err := onTheCopy([]string{"EXECUTOR_DATA_DIR=" + v}, moves); err != nil {
		return fmt.Errorf("prepare the rehearsal: %w", err)
	}
	return nil
}

// inside reports whether the absolute path p is dir or below it, and
// where below it.
func inside(p, dir string) (string, bool) {
	if !filepath.IsAbs(p) || dir == "" {
		return "", false
	}
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// health is o.Health pointed at the rehearsal on port.
func (o *Options) health(port int) health.Options {
	h := o.Health
	h.Listen, h.Port, h.Network = o.Listen, port, false
	h.Supervisor, h.PidFile, h.DataDir, h.Release = nil, "", "", health.ReleaseWant{}
	if h.Timeout <= 0 {
		h.Timeout = health.DefaultTimeout
	}
	return h
}

// waitReady waits, bounded by o.Wait, until the readiness gate of the
// real start passes for p, then runs o.Checks once.
func (o *Options) waitReady(ctx context.Context, p *proc, port int, out *tail) error {
	h := o.health(port)
	probe, err := health.ReadyProcess(h, o.Readiness, nil)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(o.Wait)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	last := errors.New("it did not write its pidfile")
	for {
		select {
		case <-p.done:
			return refused(p.exited(), out)
		case <-ctx.Done():
			return fmt.Errorf("rehearsal interrupted: %w", context.Cause(ctx))
		case <-tick.C:
		}
		if pid := p.readPid(); pid > 0 {
			pctx, cancel := context.WithTimeout(ctx, h.Timeout)
			last = probe(pctx, pid)
			cancel()
			if last == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			return refused(fmt.Sprintf("it was not ready within %s (%s)", o.Wait, strings.Join(strings.Fields(last.Error()), " ")), out)
		}
	}
	rep, err := health.Run(ctx, h, o.Checks)
	if err != nil {
		return fmt.Errorf("rehearsal interrupted: %w", err)
	}
	var failed []string
	var causes []error
	for _, c := range rep.Checks {
		if c.Status == health.Fail {
			hint := ""
			if o.Hint != nil {
				hint = o.Hint(c.Cause())
			}
			failed = append(failed, fmt.Sprintf("%s (%s)%s", c.Name, c.Reason, hint))
			causes = append(causes, c.Cause())
		}
	}
	if len(failed) > 0 {
		return refused("checks failing: "+strings.Join(failed, "; "), out, causes...)
	}
	return nil
}

// stop ends the payload: SIGTERM to its group (cancel: launch.Run sends
// it) and to every member of its cgroup g outside the group, SIGKILL to
// the group after o.StopGrace (launch.Run sends it too, spec.KillAfter,
// and then kills what left the group but holds its marker), then SIGKILL
// to every member of g still there.
func (o *Options) stop(cancel context.CancelFunc, p *proc, g *cgroup) error {
	cancel()
	killAt := time.Now().Add(o.StopGrace)
	g.term(p.readPid())
	grace := time.NewTimer(o.StopGrace)
	defer grace.Stop()
	select {
	case <-p.done:
		return o.end(g, killAt)
	case <-grace.C:
	}
	// launch.Run sends the group SIGKILL now (spec.KillAfter): it alone
	// knows whether the group's leader is reaped, after which its id may
	// name another group.
	o.Logger.Warn("the rehearsed release ignored SIGTERM; killing its process group", "pid", p.readPid())
	select {
	case <-p.done:
		return o.end(g, killAt)
	case <-time.After(time.Minute):
		return errors.New("stop the rehearsed release: still running a minute after SIGKILL")
	}
}
