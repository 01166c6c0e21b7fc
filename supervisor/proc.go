package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/internal/procscan"
)

// reqKind is what a request asks a program's loop to do.
type reqKind int

const (
	reqStart reqKind = iota
	reqStop
)

// request is one start or stop sent to a program's loop. The loop closes
// accepted once it has acted on the request (a start has forked when the
// dependencies allowed it) and sends the outcome to done: nil when the
// program is RUNNING (start) or STOPPED (stop).
type request struct {
	kind     reqKind
	accepted chan struct{}
	done     chan error // buffered, one value
}

// afterExit is what the loop does once the leader has exited and the group
// is gone.
type afterExit int

const (
	afterNone    afterExit = iota // nothing pending
	afterStopped                  // a stop: STOPPED
	afterBackoff                  // a failed start: BACKOFF or FATAL
	afterExited                   // exited from RUNNING: EXITED, maybe restart
	afterRestart                  // wedged and killed: start again
)

type probeResult struct {
	gen int
	err error
}

// proc is one program and the goroutine (loop) that owns its life. Fields
// below "loop state" are touched only by the loop.
type proc struct {
	s    *Supervisor
	spec Program
	reqs chan request
	// outW and errW are the write ends of the pipes to the log copiers,
	// given to every spawn as fds 1 and 2.
	outW, errW *os.File
	// marker, when not nil, is the program's marker file, given to every
	// spawn as fd 3: every process of the program inherits it, so a scan
	// of /proc finds them wherever they went (setsid, double fork).
	marker    *os.File
	markerPin *procscan.Pin // scans for the marker go through it
	// cg is the program's cgroup; nil without one (cgroup.go).
	cg *progCgroup
	// errLine keeps the last line of the program's stderr (a fatal
	// exit's reason).
	errLine lastLine

	// loop state
	state          State
	detail         string // shown by Status after the state
	pid, pgid      int    // leader (0: none alive) and its group (0: gone)
	gen            int    // spawn counter, tags probe results
	exitCh         chan syscall.WaitStatus
	spawnedAt      time.Time
	backoffN       int
	retryAt        time.Time
	after          afterExit
	wantStart      bool // start again once the current stop is done
	exitedExpected bool // the last exit from RUNNING was expected
	term           termination
	healthy        bool // a probe succeeded since the spawn
	healthDeadline time.Time
	probeBusy      bool
	probeNext      time.Time
	fails          int
	lastProbeErr   error
	unlive         string // the last probe's failure while RUNNING ("": it passed)
	probeCh        chan probeResult
	escaped        []procscan.Process // marked processes outside the group, at the last check
	scannedAt      time.Time          // when escaped was last looked for
	waiting        string             // the leftovers a stop or start waits for, shown by Status
	startWaiters   []chan error
	stopWaiters    []chan error
}

// termination tracks the stopsignal-then-SIGKILL of a process group.
type termination struct {
	active    bool
	leftovers bool // of a leader that exited on its own: LeftoverGrace
	began     time.Time
	killAt    time.Time
	killed    bool
	signalled map[int]syscall.Signal // escaped processes and what they were sent
}

func newProc(s *Supervisor, spec Program) *proc {
	return &proc{s: s, spec: spec, reqs: make(chan request), probeCh: make(chan probeResult, 1), detail: "not started"}
}

// loop runs the program's state machine until ctx ends.
func (p *proc) loop(ctx context.Context) {
	for {
		depsC := p.s.changedChan() // before step: a change after it wakes us
		p.step(ctx)
		var timerC <-chan time.Time
		var timer *time.Timer
		if wake := p.nextWake(); !wake.IsZero() {
			timer = time.NewTimer(time.Until(wake))
			timerC = timer.C
		}
		if !(p.state == Starting && p.pid == 0 && len(p.spec.DependsOn) > 0) {
			depsC = nil
		}
		select {
		case r := <-p.reqs:
			p.handle(ctx, r)
		case ws := <-p.exitCh:
			p.onExit(ws)
		case r := <-p.probeCh:
			p.onProbe(r)
		case <-timerC:
		case <-depsC:
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// handle acts on a start or stop request.
func (p *proc) handle(ctx context.Context, r request) {
	defer close(r.accepted)
	switch r.kind {
	case reqStart:
		// A start decided before shutdown began (a hold released as
		// everything stops) must not fork after the programs were stopped.
		p.s.mu.Lock()
		shutting := p.s.shutting
		p.s.mu.Unlock()
		if shutting {
			r.done <- ErrShuttingDown
			return
		}
		switch p.state {
		case Exited:
			if p.draining() { // started once the old group is gone
				p.wantStart = true
				p.startWaiters = append(p.startWaiters, r.done)
				return
			}
			fallthrough
		case Stopped, Fatal:
			p.backoffN = 0
			p.beginStart()
			p.startWaiters = append(p.startWaiters, r.done)
			p.step(ctx) // fork now when possible, so starts keep their order
		case Starting, Backoff:
			p.startWaiters = append(p.startWaiters, r.done)
		case Running:
			r.done <- nil
		case Stopping:
			p.wantStart = true
			p.startWaiters = append(p.startWaiters, r.done)
		}
	case reqStop:
		p.wantStart = false
		switch {
		case p.draining():
			p.stopLive(r)
		case p.state == Stopped || p.state == Exited || p.state == Fatal:
			r.done <- nil
		case p.state == Backoff:
			p.toStopped()
			r.done <- nil
		default: // Starting, Running, Stopping
			p.stopLive(r)
		}
	}
}

// draining reports whether the program EXITED from RUNNING and the rest
// of its process group is still being stopped (its leftovers).
func (p *proc) draining() bool { return p.state == Exited && p.after == afterExited }

// stopLive acts on stop request r while a process of the program may
// live: STOPPED at once when none does, else STOPPING until the group is
// gone (a termination under way keeps its SIGKILL deadline).
func (p *proc) stopLive(r request) {
	if p.pid == 0 && !p.othersAlive() {
		p.groupGone()
		p.term = termination{}
		p.after = afterNone
		p.toStopped()
		r.done <- nil
		return
	}
	p.stopWaiters = append(p.stopWaiters, r.done)
	p.after = afterStopped
	if p.state != Stopping {
		p.setState(Stopping, "stopping")
		p.s.log.Info("stopping", "program", p.spec.Name, "pid", p.pid, "signal", signalName(p.stopSignal()))
	}
	if !p.term.active {
		p.beginTerm(time.Now())
	}
}

// step does whatever is due now.
func (p *proc) step(ctx context.Context) {
	now := time.Now()
	p.killOverdue(now)
	// The leader is gone: finish once the whole group is, and every
	// process that left it.
	if p.after != afterNone && p.pid == 0 {
		if p.waitLeftovers(now) {
			return
		}
		p.finish(now)
		now = time.Now()
	}
	switch p.state {
	case Starting:
		if p.pid == 0 {
			p.startWhenClear(ctx, now)
			return
		}
		if p.after != afterNone {
			return // being killed after a failed health wait
		}
		p.gateStart(now)
	case Running:
		if p.pid != 0 && p.after == afterNone && p.spec.Probe != nil &&
			!p.probeBusy && !now.Before(p.probeNext) {
			p.launchProbe(p.healthInterval())
		}
	case Backoff:
		if !now.Before(p.retryAt) {
			p.beginStart()
			p.step(ctx)
		}
	}
}

// killOverdue sends SIGKILL to the process group and what escaped it once
// stopwaitsecs has passed.
func (p *proc) killOverdue(now time.Time) {
	if p.term.active && !p.term.killed && !now.Before(p.term.killAt) && (p.rescan() || p.pid != 0) {
		msg := "stopwaitsecs passed, killing the process group"
		if p.term.leftovers {
			msg = "the leftover grace passed, killing what is left of the process group"
		}
		p.s.log.Warn(msg, "program", p.spec.Name, "pgid", p.pgid, "after", p.term.killAt.Sub(p.term.began), "escaped", procscan.Join(p.escaped))
		p.s.reaper.signalGroup(p.pgid, syscall.SIGKILL)
		p.cg.kill()
		p.term.killed = true
		p.signalEscaped()
	}
}

// waitLeftovers reports whether processes of the program's group (or that
// left it) are still alive, stopping them (stopsignal, then SIGKILL at
// stopwaitsecs) and saying so in its status; once none is, it forgets the
// group and the termination.
func (p *proc) waitLeftovers(now time.Time) bool {
	if p.othersAlive() {
		if !p.term.active {
			p.beginTerm(now)
		}
		p.signalEscaped()
		p.setWaiting(p.leftoverList())
		return true
	}
	p.groupGone()
	p.term = termination{}
	p.setWaiting("")
	return false
}

// startWhenClear spawns the program once a previous instance's leftovers
// are gone and every program it depends on is RUNNING (its status says
// which it waits for).
func (p *proc) startWhenClear(ctx context.Context, now time.Time) {
	if p.waitLeftovers(now) {
		return
	}
	if dep := p.s.notRunning(p.spec.DependsOn); dep != "" {
		why := "waiting for " + dep + " to be RUNNING"
		if d := p.s.Get(dep); d.State == Fatal {
			why += " (it is FATAL: " + d.Detail + ")"
		}
		p.setDetail(why)
		return
	}
	p.spawn(ctx, now)
}

// gateStart moves a started program to RUNNING once it has been up
// startsecs and, with a probe, answered healthy; without a healthy answer
// within its health wait, the start failed (it is stopped, then backs
// off); otherwise it probes again.
func (p *proc) gateStart(now time.Time) {
	up := now.Sub(p.spawnedAt) >= p.spec.StartSecs
	switch {
	case p.spec.Probe == nil:
		if up {
			p.toRunning(now)
		}
	case p.healthy && up:
		p.toRunning(now)
	case !now.Before(p.healthDeadline):
		why := fmt.Sprintf("no healthy answer within %s", p.healthWait())
		if p.lastProbeErr != nil {
			why += ": " + p.lastProbeErr.Error()
		}
		p.s.log.Warn("start failed", "program", p.spec.Name, "pid", p.pid, "reason", why)
		p.detail = why
		p.after = afterBackoff
		p.beginTerm(now)
	case !p.probeBusy && !now.Before(p.probeNext):
		p.launchProbe(p.s.opts.StartPoll)
	}
}

// nextWake returns when step has something to do next; zero for never.
func (p *proc) nextWake() time.Time {
	var wake time.Time
	at := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	poll := time.Now().Add(p.s.opts.GroupPoll)
	if p.term.active && !p.term.killed {
		at(p.term.killAt)
	}
	if p.pid == 0 && p.pgid != 0 {
		at(poll) // the leader is gone; watch the rest of the group
	}
	if len(p.escaped) > 0 {
		at(time.Now().Add(max(p.s.opts.GroupPoll, escapedPoll)))
	}
	switch p.state {
	case Starting:
		if p.pid != 0 && p.after == afterNone {
			if d := p.spawnedAt.Add(p.spec.StartSecs); p.spec.Probe == nil || p.healthy {
				at(d)
			}
			if p.spec.Probe != nil {
				at(p.healthDeadline)
				if !p.probeBusy {
					at(p.probeNext)
				}
			}
		}
	case Running:
		if p.spec.Probe != nil && !p.probeBusy && p.after == afterNone {
			at(p.probeNext)
		}
	case Backoff:
		at(p.retryAt)
	}
	return wake
}

// onExit handles the leader's exit status.
func (p *proc) onExit(ws syscall.WaitStatus) {
	now := time.Now()
	p.pid, p.exitCh = 0, nil
	desc := describeExit(ws)
	switch {
	case p.after != afterNone:
		// We asked for it (stop, failed health wait, wedge).
		p.s.log.Info("exited", "program", p.spec.Name, "pid", p.pgid, "status", desc)
	case p.classExit(ws, desc):
	case p.state == Starting:
		p.after = afterBackoff
		p.detail = "exited too quickly (" + desc + ")"
		p.s.log.Warn("exited too quickly", "program", p.spec.Name, "pid", p.pgid, "status", desc, "up", now.Sub(p.spawnedAt).Round(time.Millisecond))
	default: // Running
		expected := !ws.Signaled() && p.spec.exitExpected(ws.ExitStatus())
		p.after = afterExited
		if expected {
			p.detail = desc + " (expected)"
		} else {
			p.detail = desc + " (unexpected)"
		}
		p.s.log.Warn("exited", "program", p.spec.Name, "pid", p.pgid, "status", desc, "expected", expected)
		p.exitedExpected = expected
	}
	// groupAlive first: a kill(2) answers at once where a scan of /proc
	// for the marker's holders takes tens of milliseconds.
	if !p.term.active && (groupAlive(p.pgid) || p.othersAlive()) {
		// The leftovers of a leader that exited on its own: stopped at
		// once, with a short grace of their own (LeftoverGrace).
		p.s.log.Info("stopping what is left of the program's process group", "program", p.spec.Name, "pgid", p.pgid, "grace", p.leftoverGrace())
		p.beginTermWithin(now, p.leftoverGrace())
		p.term.leftovers = true
		p.waiting = p.leftoverList()
	}
	if p.after == afterExited {
		// EXITED now, never RUNNING without a process; a restart
		// follows once the rest of the group is gone (finish).
		why := p.detail
		if p.restarts() {
			why += "; restarting once the rest of its process group is gone"
		}
		p.setState(Exited, why)
	} else if p.waiting != "" {
		p.publish(false) // what the failed start waits for
	}
}

// restarts reports whether a program that exited from RUNNING is
// started again: a start was asked for meanwhile, or autorestart says so.
func (p *proc) restarts() bool {
	ar := p.spec.Autorestart
	return p.wantStart || ar == AutorestartTrue || (ar == AutorestartUnexpected || ar == "") && !p.exitedExpected
}

// leftoverGrace is the grace of a dead leader's leftovers: LeftoverGrace,
// never longer than stopwaitsecs.
func (p *proc) leftoverGrace() time.Duration { return min(p.s.opts.LeftoverGrace, p.spec.StopWait) }

// finish moves on once the leader and its group are gone.
func (p *proc) finish(now time.Time) {
	after := p.after
	p.after = afterNone
	if p.finishClassed(after) {
		return
	}
	switch after {
	case afterStopped:
		p.toStopped()
		for _, w := range p.stopWaiters {
			w <- nil
		}
		p.stopWaiters = nil
		if p.wantStart {
			p.wantStart = false
			p.backoffN = 0
			p.beginStart()
		}
	case afterBackoff:
		p.backoffN++
		if p.backoffN > p.spec.StartRetries {
			p.toFatal(fmt.Sprintf("%s; gave up after %d attempts", p.detail, p.backoffN))
			return
		}
		delay := p.s.backoff(p.backoffN)
		p.retryAt = now.Add(delay)
		p.setState(Backoff, fmt.Sprintf("%s; retry %d of %d in %s", p.detail, p.backoffN, p.spec.StartRetries, delay))
		p.s.log.Info("backoff", "program", p.spec.Name, "retry", p.backoffN, "of", p.spec.StartRetries, "in", delay)
	case afterExited:
		if p.state != Exited {
			p.setState(Exited, p.detail)
		}
		if p.restarts() {
			p.wantStart = false
			p.s.log.Info("restarting", "program", p.spec.Name)
			p.beginStart()
		}
	case afterRestart:
		p.s.log.Info("restarting wedged program", "program", p.spec.Name)
		p.beginStart()
	}
}

// beginStart enters STARTING without a process: step spawns when the
// dependencies are RUNNING and no old process is left.
func (p *proc) beginStart() {
	p.healthy, p.lastProbeErr = false, nil
	p.setState(Starting, "starting")
}

// beginTerm sends stopsignal to the group and arms the SIGKILL deadline
// (stopwaitsecs).
func (p *proc) beginTerm(now time.Time) { p.beginTermWithin(now, p.spec.StopWait) }

// beginTermWithin is beginTerm with SIGKILL after wait.
func (p *proc) beginTermWithin(now time.Time, wait time.Duration) {
	p.term = termination{active: true, began: now, killAt: now.Add(wait), signalled: map[int]syscall.Signal{}}
	p.s.reaper.signalGroup(p.pgid, p.stopSignal())
	p.scannedAt = time.Time{} // look for escaped processes now
	p.othersAlive()
	p.signalEscaped()
}

// escapedPoll is how often escaped processes are looked for while they
// live: a scan of /proc costs more than a kill(2).
const escapedPoll = 50 * time.Millisecond

// othersAlive reports whether a process of the program other than the
// leader is alive: a member of its process group, or a process that
// holds its marker outside the group (it called setsid or setpgid). It
// updates p.escaped.
func (p *proc) othersAlive() bool {
	group := groupAlive(p.pgid)
	// Scan for escaped processes at most every escapedPoll (a scan reads
	// every descriptor in /proc); in between, the last scan's answer
	// holds. Nothing can newly take the marker once the group is gone but
	// a fork, and forks exclude scans (reaper.noForks); rescan forces one.
	if time.Since(p.scannedAt) < escapedPoll {
		return group || len(p.escaped) > 0
	}
	p.escaped, p.scannedAt = nil, time.Now()
	if p.marker != nil {
		done := p.s.reaper.noForks()
		defer done()
		if m, err := procscan.Openers(p.markerPin); err != nil {
			p.s.log.Warn("look for the program's processes", "program", p.spec.Name, "err", err)
		} else {
			for _, q := range m[p.markerPin] {
				if q.PID != p.pid && procscan.Running(q.PID) && (p.pgid <= 0 || pgidOf(q.PID) != p.pgid) {
					p.escaped = append(p.escaped, q)
				}
			}
		}
	}
	p.escaped = append(p.escaped, p.cgroupEscaped(p.escaped)...)
	return group || len(p.escaped) > 0
}

// rescan is othersAlive without the throttle.
func (p *proc) rescan() bool {
	p.scannedAt = time.Time{}
	return p.othersAlive()
}

// signalEscaped sends the escaped processes the signal of the current
// termination (stopsignal, or SIGKILL once stopwaitsecs passed), once
// each, logging the first time each is seen.
func (p *proc) signalEscaped() {
	if !p.term.active {
		return
	}
	sig := p.stopSignal()
	if p.term.killed {
		sig = syscall.SIGKILL
	}
	done := p.s.reaper.noForks()
	defer done()
	for _, q := range p.escaped {
		if p.term.signalled[q.PID] == sig {
			continue
		}
		if _, seen := p.term.signalled[q.PID]; !seen {
			p.s.log.Warn("stopping a process that left the program's process group", "program", p.spec.Name, "pid", q.PID, "command", q.Command, "signal", signalName(sig))
		}
		procscan.Signal(q.PID, sig, func(pid int) bool { return procscan.Holds(pid, p.markerPin) || p.cg.holds(pid) })
		p.term.signalled[q.PID] = sig
	}
}

// leftoverList names the processes being waited for.
func (p *proc) leftoverList() string {
	var parts []string
	if groupAlive(p.pgid) {
		parts = append(parts, fmt.Sprintf("process group %d", p.pgid))
	}
	if len(p.escaped) > 0 {
		parts = append(parts, "pid "+procscan.Join(p.escaped))
	}
	return strings.Join(parts, " and ")
}

// setWaiting publishes what the program waits for to exit ("" for
// nothing): Status shows it, so processes that outlive their leader are
// never hidden behind EXITED or STOPPED.
func (p *proc) setWaiting(w string) {
	if w != p.waiting {
		p.waiting = w
		p.publish(false)
	}
}

func (p *proc) stopSignal() syscall.Signal {
	if p.spec.StopSignal == 0 {
		return syscall.SIGTERM
	}
	return p.spec.StopSignal
}

func (p *proc) healthWait() time.Duration {
	if p.spec.HealthWait <= 0 {
		return 60 * time.Second
	}
	return p.spec.HealthWait
}

func (p *proc) healthInterval() time.Duration {
	if p.spec.HealthInterval <= 0 {
		return 5 * time.Second
	}
	return p.spec.HealthInterval
}

// spawn forks the program. A failure makes it FATAL.
func (p *proc) spawn(ctx context.Context, now time.Time) {
	cmd, err := p.command(ctx)
	if err != nil {
		p.toFatalBrief(err)
		return
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		p.toFatal("open " + os.DevNull + ": " + err.Error())
		return
	}
	defer devnull.Close()
	files := []uintptr{devnull.Fd(), p.outW.Fd(), p.errW.Fd()}
	if p.marker != nil {
		files = append(files, p.marker.Fd())
	}
	for _, f := range p.spec.ExtraFiles {
		files = append(files, f.Fd())
	}
	attr := &syscall.ProcAttr{
		Dir:   cmd.Dir,
		Env:   cmd.Env,
		Files: files,
		Sys: &syscall.SysProcAttr{
			Setpgid:    true,
			Credential: cmd.Credential,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	p.cg.into(attr.Sys)
	ch := make(chan syscall.WaitStatus, 1)
	pid, err := p.s.reaper.spawn(func() (int, error) { return syscall.ForkExec(cmd.Path, cmd.Args, attr) }, ch)
	if err != nil && p.cg != nil && errors.Is(err, syscall.ENOSYS) {
		// No clone3 (qemu-user, old seccomp filters): start it without a
		// cgroup, found by process group and marker as where there is none.
		p.dropCgroup(err)
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = false, 0
		pid, err = p.s.reaper.spawn(func() (int, error) { return syscall.ForkExec(cmd.Path, cmd.Args, attr) }, ch)
	}
	if err != nil {
		p.toFatal(fmt.Sprintf("spawn %s: %v", cmd.Path, err))
		return
	}
	p.gen++
	p.pid, p.pgid, p.exitCh = pid, pid, ch
	if p.marker != nil {
		p.recordGroup(pid)
	}
	// From the fork, not from when the spawn began: preparing the command
	// (the user's profile, its PATH) must not count as time up.
	now = time.Now()
	p.spawnedAt = now
	p.healthDeadline = now.Add(p.healthWait())
	p.probeNext = now
	p.healthy, p.probeBusy, p.fails = false, false, 0
	p.setDetail("started")
	p.s.log.Info("spawned", "program", p.spec.Name, "pid", pid, "command", cmd.Path)
}

// recordGroup writes the new process group (its id and its leader's start
// time) to <StateDir>/<name>.group, so that the next supervisor finds the
// group's members even if they closed the marker.
func (p *proc) recordGroup(pid int) {
	st, err := procscan.ReadStat(pid)
	if err == nil {
		err = os.WriteFile(p.s.groupRecord(p.spec.Name), fmt.Appendf(nil, "%d %d\n", pid, st.StartTime), 0o600)
	}
	if err != nil {
		p.s.log.Warn("record the program's process group", "program", p.spec.Name, "pgid", pid, "err", err)
	}
}

// groupGone forgets the program's process group once no process of it is
// left, and removes its record: a record exists only while the group may
// live, so a later supervisor never stops an unrelated group that reused
// the id.
func (p *proc) groupGone() {
	if p.pgid != 0 && p.s.opts.StateDir != "" {
		if err := os.Remove(p.s.groupRecord(p.spec.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			p.s.log.Warn("remove the program's process group record", "program", p.spec.Name, "err", err)
		}
	}
	p.pgid = 0
}

// command prepares the program's command for one start.
func (p *proc) command(ctx context.Context) (*Command, error) {
	if p.spec.Build != nil {
		c, err := p.spec.Build(ctx)
		if err != nil {
			return nil, err
		}
		if c == nil || c.Path == "" || len(c.Args) == 0 {
			return nil, errors.New("empty command")
		}
		return c, nil
	}
	env, err := p.programEnv()
	if err != nil {
		return nil, err
	}
	path, err := lookPath(p.spec.Command[0], envGet(env, "PATH"))
	if err != nil {
		return nil, err
	}
	if d := p.spec.Directory; d != "" {
		st, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("directory: %w", err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("directory %s is not a directory", d)
		}
	}
	cred, err := lookupUser(p.spec.User)
	if err != nil {
		return nil, err
	}
	return &Command{Path: path, Args: p.spec.Command, Dir: p.spec.Directory, Env: env, Credential: cred}, nil
}

// lookPath finds name: as given when it has a slash, else on path.
func lookPath(name, path string) (string, error) {
	check := func(f string) error {
		st, err := os.Stat(f)
		if err != nil {
			return err
		}
		if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable file", f)
		}
		return nil
	}
	if strings.Contains(name, "/") {
		if err := check(name); err != nil {
			return "", fmt.Errorf("command: %w", err)
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		if f := filepath.Join(dir, name); check(f) == nil {
			return f, nil
		}
	}
	return "", fmt.Errorf("command %q not found on PATH %q", name, path)
}

// launchProbe runs one probe in its own goroutine.
func (p *proc) launchProbe(next time.Duration) {
	p.probeBusy = true
	p.probeNext = time.Now().Add(next)
	gen, probe, timeout, pid := p.gen, p.spec.Probe, p.s.opts.ProbeTimeout, p.pid
	go func() {
		ctx, cancel := context.WithTimeout(p.s.ctx, timeout)
		var err error
		if pp, ok := probe.(ProcessProbe); ok {
			err = pp.CheckProcess(ctx, pid)
		} else {
			err = probe.Check(ctx)
		}
		cancel()
		p.probeCh <- probeResult{gen, err}
	}()
}

// onProbe handles one probe's result.
func (p *proc) onProbe(r probeResult) {
	p.probeBusy = false
	if r.gen != p.gen || p.pid == 0 || p.after != afterNone {
		return
	}
	switch p.state {
	case Starting:
		if r.err == nil {
			p.healthy = true
			p.setDetail("ready")
		} else {
			// hbx status says what the start waits for, not just "started".
			p.lastProbeErr = r.err
			p.setDetail("not ready: " + r.err.Error())
		}
	case Running:
		p.onLiveness(r.err)
		if r.err == nil {
			p.fails = 0
			return
		}
		if p.spec.WedgeFailures == 0 {
			return // no wedge detection: only said in Status
		}
		p.fails++
		p.lastProbeErr = r.err
		p.s.log.Warn("health check failed", "program", p.spec.Name, "failures", p.fails, "of", p.spec.WedgeFailures, "err", r.err)
		if p.fails >= p.spec.WedgeFailures {
			p.s.log.Error("program wedged: alive but unhealthy; restarting", "program", p.spec.Name, "pid", p.pid, "failures", p.fails, "err", r.err)
			p.after = afterRestart
			p.setState(Stopping, fmt.Sprintf("wedged (%d failed health checks: %v); restarting", p.fails, r.err))
			p.beginTerm(time.Now())
		}
	}
}

// onLiveness records a probe's result while RUNNING in Status.Unhealthy
// (a failure, "" once one passes), logging each change.
func (p *proc) onLiveness(err error) {
	was := p.unlive
	p.unlive = ""
	if err != nil {
		p.unlive = err.Error()
	}
	if p.unlive == was {
		return
	}
	if err != nil {
		p.s.log.Warn("running but not live", "program", p.spec.Name, "pid", p.pid, "err", err)
	} else {
		p.s.log.Info("live again", "program", p.spec.Name, "pid", p.pid)
	}
	p.publish(false)
}

func (p *proc) toRunning(now time.Time) {
	p.backoffN = 0
	p.fails = 0
	p.unlive = ""
	p.probeNext = now.Add(p.healthInterval())
	p.setState(Running, "")
	p.s.log.Info("running", "program", p.spec.Name, "pid", p.pid, "after", now.Sub(p.spawnedAt).Round(time.Millisecond))
	for _, w := range p.startWaiters {
		w <- nil
	}
	p.startWaiters = nil
}

// toStopped enters STOPPED after a stop; its description is the time
// (describe), not a word repeating the state.
func (p *proc) toStopped() {
	p.setState(Stopped, "")
	if !p.wantStart {
		p.failStarts(fmt.Errorf("%w: %s was stopped", ErrStartFailed, p.spec.Name))
	}
}

func (p *proc) toFatal(reason string) {
	p.s.log.Error("fatal: not starting again", "program", p.spec.Name, "reason", reason)
	p.setState(Fatal, reason)
	p.failStarts(fmt.Errorf("%w: %s: %s", ErrStartFailed, p.spec.Name, reason))
}

// Briefer is an error that also has a short form for a program's
// status line (FATAL detail): a Build error implementing it shows
// Brief() there, while the log and the start's error keep Error().
type Briefer interface {
	error
	Brief() string
}

// toFatalBrief is toFatal for err, shown briefly when err wraps a Briefer.
func (p *proc) toFatalBrief(err error) {
	var b Briefer
	if !errors.As(err, &b) {
		p.toFatal(err.Error())
		return
	}
	p.s.log.Error("fatal: not starting again", "program", p.spec.Name, "reason", err.Error())
	p.setState(Fatal, b.Brief())
	p.failStarts(fmt.Errorf("%w: %s: %w", ErrStartFailed, p.spec.Name, err))
}

func (p *proc) failStarts(err error) {
	for _, w := range p.startWaiters {
		w <- err
	}
	p.startWaiters = nil
}

// setState enters st with detail and publishes the change.
func (p *proc) setState(st State, detail string) {
	p.state, p.detail = st, detail
	p.publish(true)
}

// setDetail changes the detail shown with the current state.
func (p *proc) setDetail(detail string) {
	if detail != p.detail {
		p.detail = detail
		p.publish(false)
	}
}

// publish copies the loop's view into the supervisor's status table.
func (p *proc) publish(stateChanged bool) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status[p.spec.Name]
	if stateChanged {
		st.Since = time.Now()
	}
	st.State, st.PID, st.detail, st.waiting = p.state, p.pid, p.detail, p.waiting
	st.Unhealthy = ""
	if p.state == Running {
		st.Unhealthy = p.unlive
	}
	st.drainFrom, st.killAt = time.Time{}, time.Time{}
	if p.waiting != "" && p.term.active {
		st.drainFrom, st.killAt = p.term.began, p.term.killAt
	}
	st.Started = time.Time{}
	if p.pid != 0 {
		st.Started = p.spawnedAt
	}
	s.status[p.spec.Name] = st
	s.changedLocked()
}

// mergeEnv returns the lists in order, later keys replacing earlier ones
// in place.
func mergeEnv(lists ...[]string) []string {
	idx := map[string]int{}
	var out []string
	for _, l := range lists {
		for _, kv := range l {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := idx[k]; ok {
				out[i] = kv
				continue
			}
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// envGet returns key's value in env.
func envGet(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}
