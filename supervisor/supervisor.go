package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/pathtrust"
	"github.com/hermesbox/hbx/internal/procscan"
)

// Options configure a Supervisor. Zero durations take the defaults given.
type Options struct {
	// Programs are the supervised programs.
	Programs []Program
	// Env is added to the environment of every program without Build,
	// os.Environ() form, after PATH, HOME, USER, LOGNAME and SHELL of its
	// user and before its Environment (programEnv has the order). nil
	// gives programs none of the supervisor's own environment.
	Env []string
	// Socket is the control socket's path; "" serves no socket. Its
	// directory is created 0755; the socket is mode 0600.
	Socket string
	// ErrorClasses are the classes of Check errors a refusal carries
	// over the socket (Result.Class, an error answer's class); nil: none.
	ErrorClasses []ErrorClass
	// Install, when set, runs when Run starts, before any program and
	// before the reaper (so it may run and wait for children), while the
	// socket already answers status. progress sets the detail Status
	// shows for InstallProgram ("installing the release (2/5 layers)").
	// A failed install is retried like a failed start of InstallProgram:
	// after BackoffBase, doubling up to BackoffMax, StartRetries times;
	// then InstallProgram is FATAL with the install's error as the reason
	// and is not started (the others are).
	Install func(ctx context.Context, progress func(detail string)) error
	// InstallProgram names the program the install is for (one of
	// Programs): while the install runs it is STARTING, between failed
	// attempts BACKOFF, after the last FATAL. "" runs the install once
	// and starts every program whatever its outcome.
	InstallProgram string
	// Logger receives the supervisor's structured log; nil discards.
	Logger *slog.Logger
	// BackoffBase is the delay before the first retry of a failed start;
	// each further retry doubles it. Default 500ms.
	BackoffBase time.Duration
	// BackoffMax caps the retry delay. Default 30s.
	BackoffMax time.Duration
	// StartPoll is the probe period while a program is STARTING. Default
	// 100ms.
	StartPoll time.Duration
	// ProbeTimeout bounds one probe. Default 2s.
	ProbeTimeout time.Duration
	// GroupPoll is how often a process group is checked for leftovers
	// once its leader has exited. Default 5ms.
	GroupPoll time.Duration
	// LeftoverGrace is how long what is left of a program's process
	// group (and the processes that left it) gets between stopsignal
	// and SIGKILL once its leader exited without being asked to: the
	// leftovers of a dead leader (Executor's workerd children ignore
	// SIGTERM), stopped at once so the program restarts within a
	// second, not after stopwaitsecs, which is for a clean stop of a
	// live program. Never longer than the program's StopWait. Default
	// 200ms.
	LeftoverGrace time.Duration
	// StateDir, when set, is the supervisor's own state: supervisor.lock,
	// held while Run runs (a second supervisor on the same StateDir
	// refuses with ErrAlreadyRunning whatever its socket), and one marker
	// file per program, <name>.marker, that every process of the program
	// inherits as fd 3. Through the markers, Run stops what a previous
	// supervisor left running before it starts anything, and a stop also
	// stops processes that left the program's process group. Created
	// 0700.
	StateDir string
	// Cgroups, with StateDir, runs every program in a cgroup of its own
	// where a writable cgroup v2 hierarchy is mounted (cgroup.go); where
	// none is, Info.NoCgroups says so and process groups and markers
	// alone find the programs' processes.
	Cgroups bool
	// HandleSignals makes Run handle every signal whose default action
	// would end the process (see Signals): it never dies of one with
	// programs running.
	HandleSignals bool
}

// Supervisor supervises a fixed set of programs. Create it with New and
// call Run once; the other methods may be called from any goroutine while
// Run runs.
type Supervisor struct {
	opts  Options
	log   *slog.Logger
	procs map[string]*proc
	order []*proc // by priority, then name

	reaper *reaper
	ctx    context.Context // lives as long as the program loops
	claim  claim           // taken by Claim, released when Run returns

	logMu sync.Mutex
	logs  []*logWriter

	mu       sync.Mutex
	status   map[string]Status
	changed  chan struct{} // closed and replaced on every status change
	held     map[string]int
	shutting bool

	info Info

	shutdownOnce sync.Once
	shutdownReq  chan struct{} // closed by Shutdown
	stopped      chan struct{} // closed once every program is stopped at shutdown, or Run did not start
	ready        chan struct{} // closed once Run has started the loops and sent the autostart, or did not start (startErr)
	startErr     error         // why Run did not start; set before ready is closed, nil once it started
	failOnce     sync.Once     // notStarted's
}

// New checks opts and returns a Supervisor. Every broken rule is reported
// at once, each error wrapping ErrInvalid: names, empty commands, unknown
// dependencies and dependency cycles, negative durations, log files, and
// users that do not exist or need root.
func New(opts Options) (*Supervisor, error) {
	errs := checkPrograms(opts.Programs)
	if opts.Install != nil && opts.InstallProgram != "" && !slices.ContainsFunc(opts.Programs, func(p Program) bool { return p.Name == opts.InstallProgram }) {
		errs = append(errs, fmt.Errorf("%w: install program %q: not one of the programs", ErrInvalid, opts.InstallProgram))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.BackoffBase, 500*time.Millisecond)
	def(&opts.BackoffMax, 30*time.Second)
	def(&opts.StartPoll, 100*time.Millisecond)
	def(&opts.ProbeTimeout, 2*time.Second)
	def(&opts.GroupPoll, 5*time.Millisecond)
	def(&opts.LeftoverGrace, 200*time.Millisecond)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Supervisor{
		opts: opts, log: opts.Logger, procs: map[string]*proc{},
		status: map[string]Status{}, changed: make(chan struct{}), held: map[string]int{},
		shutdownReq: make(chan struct{}), stopped: make(chan struct{}), ready: make(chan struct{}),
	}
	for _, spec := range opts.Programs {
		p := newProc(s, spec)
		s.procs[spec.Name] = p
		s.order = append(s.order, p)
		s.status[spec.Name] = Status{Name: spec.Name, State: Stopped, detail: "not started", Priority: spec.Priority}
	}
	slices.SortStableFunc(s.order, func(a, b *proc) int {
		return cmp.Or(cmp.Compare(a.spec.Priority, b.spec.Priority), strings.Compare(a.spec.Name, b.spec.Name))
	})
	return s, nil
}

// backoff is the delay before retry n (1-based).
func (s *Supervisor) backoff(n int) time.Duration {
	d := s.opts.BackoffBase
	for i := 1; i < n && d < s.opts.BackoffMax; i++ {
		d *= 2
	}
	return min(d, s.opts.BackoffMax)
}

// Run supervises until ctx ends or Shutdown is called, then stops every
// program in reverse priority order, kills what is left of their
// descendants and returns nil. In order it: claims the state and the
// socket (Claim, unless called before; refusing with ErrAlreadyRunning
// when another live supervisor holds them, removing a stale socket),
// becomes a child subreaper, checks the programs' log paths (checkLogs),
// runs the install hook, starts the reaper and the program loops, serves
// the socket and starts the autostart programs in priority order. It returns an error only when it
// cannot start, a *StartError; the calls that waited for it (the install
// on start), and later ones, then fail with "supervisor did not start: "
// and that error, wrapping ErrShuttingDown, before the socket closes.
func (s *Supervisor) Run(ctx context.Context) (err error) {
	// Whatever stops the start, the calls waiting for it are answered
	// (the deferred server shutdown below does it first, so they reach
	// their clients).
	defer func() {
		if err != nil {
			s.notStarted(err)
		}
	}()
	ctx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	if s.opts.HandleSignals {
		stop := s.handleSignals()
		defer stop()
	}
	go func() {
		select {
		case <-s.shutdownReq:
			cancelRun(errShutdownRequested)
		case <-ctx.Done():
		}
	}()
	if err := s.Claim(); err != nil {
		return &StartError{err}
	}
	defer s.unclaim()
	ln, err := s.listen()
	if err != nil {
		return &StartError{err}
	}
	if ln != nil {
		defer s.removeSocket()
		defer ln.Close()
	}
	s.becomeSubreaper()
	if err := s.stopLeftovers(ctx); err != nil {
		return &StartError{err}
	}
	if err := s.recordCgroups(); err != nil {
		return &StartError{fmt.Errorf("record the programs' cgroups: %w", err)}
	}
	if err := s.checkLogs(); err != nil {
		return &StartError{err}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// Served before the install, so status tells what it is doing;
	// starts, stops and holds wait for the program loops.
	srv := s.serve(ln, &wg)
	defer func() {
		if err != nil {
			s.notStarted(err) // answered before the server closes
		}
		s.closeServer(srv) // closed already after a shutdown
	}()
	installFailed := s.installFirst(ctx)
	loopCtx, cancelLoops := context.WithCancel(context.WithoutCancel(ctx))
	s.ctx = loopCtx
	defer cancelLoops()
	closers, err := s.startLoops(loopCtx, &wg)
	if err != nil {
		return &StartError{err}
	}
	defer s.closeLogs(closers)
	if ctx.Err() == nil {
		s.request(loopCtx, reqStart, s.autostart(installFailed)) // accepted in order; outcomes are logged
	}
	// Only now do calls that waited for the install go on: their stops
	// and holds come after the autostart's starts, never before them.
	close(s.ready)
	<-ctx.Done()
	s.stopEverything(ctx, loopCtx, srv)
	return nil
}

// StartError is an error of Run before any program started (its locks,
// the control socket, the leftovers of a dead supervisor, the log files):
// a start-up error, as the caller's own before Run. Its message is Err's.
type StartError struct{ Err error }

func (e *StartError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *StartError) Unwrap() error { return e.Err }

// IsStartError reports whether err is, or wraps, a *StartError.
func IsStartError(err error) bool {
	var se *StartError
	return errors.As(err, &se)
}

// listen opens the control socket (nil without Options.Socket).
func (s *Supervisor) listen() (net.Listener, error) {
	if s.opts.Socket == "" {
		return nil, nil
	}
	return listen(s.opts.Socket)
}

// removeSocket removes the control socket's file.
func (s *Supervisor) removeSocket() {
	if rerr := os.Remove(s.opts.Socket); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		s.log.Warn("remove socket", "err", rerr)
	}
}

// becomeSubreaper makes the supervisor a child subreaper, or says in Info
// and the log why not and what still holds (PID 1 is every orphan's
// parent anyway).
func (s *Supervisor) becomeSubreaper() {
	if err := setSubreaper(); err != nil && os.Getpid() != 1 {
		s.mu.Lock()
		s.info.NotSubreaper = fmt.Sprintf("not a child subreaper (prctl PR_SET_CHILD_SUBREAPER: %v): orphaned descendants are reparented to init and reaped there; stops still find them by process group (and, with a state directory, by marker)", err)
		s.mu.Unlock()
		s.log.Warn("supervisor is " + s.info.NotSubreaper)
	}
}

// serve serves the control API on ln in wg (nil server without ln).
func (s *Supervisor) serve(ln net.Listener, wg *sync.WaitGroup) *http.Server {
	if ln == nil {
		return nil
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve socket", "err", err)
		}
	})
	return srv
}

// startLoops starts the reaper, opens the programs' log files and starts
// one loop per program in wg; Run marks the supervisor ready (s.ready)
// once the autostart is sent. closers are the log files.
func (s *Supervisor) startLoops(loopCtx context.Context, wg *sync.WaitGroup) (closers []io.Closer, err error) {
	s.reaper = newReaper(s.log)
	wg.Go(func() { s.reaper.run(loopCtx) })
	if closers, err = s.openLogs(wg); err != nil {
		return nil, err
	}
	for _, p := range s.order {
		wg.Go(func() { p.loop(loopCtx) })
	}
	s.log.Info("supervisor started", "pid", os.Getpid(), "programs", len(s.order), "socket", s.opts.Socket)
	return closers, nil
}

// closeLogs closes the programs' log files, logging failures.
func (s *Supervisor) closeLogs(closers []io.Closer) {
	for _, c := range closers {
		if cerr := c.Close(); cerr != nil {
			s.log.Warn("close log", "err", cerr)
		}
	}
}

// autostart lists the programs started at once, in priority order: those
// with autostart, but not the install's program when its install failed.
func (s *Supervisor) autostart(installFailed bool) []string {
	var auto []string
	for _, p := range s.order {
		if p.spec.Autostart && !(installFailed && p.spec.Name == s.opts.InstallProgram) {
			auto = append(auto, p.spec.Name)
		}
	}
	return auto
}

// stopEverything, once ctx has ended, stops every program in reverse
// priority order and what escaped them, then the control server.
func (s *Supervisor) stopEverything(ctx, loopCtx context.Context, srv *http.Server) {
	s.log.Info("stopping everything", "cause", context.Cause(ctx))
	s.beginShutdown()
	start := time.Now()
	s.stopGroups(loopCtx, s.names(nil))
	s.killOrphans(loopCtx)
	close(s.stopped)
	s.log.Info("all programs stopped", "took", time.Since(start).Round(time.Millisecond))
	s.closeServer(srv)
}

// notStarted answers, with err, every call that waits for Run to start
// the program loops (waitInstall) and every shutdown that waits for the
// programs to stop (none runs): Run returns err. Calls made later get
// the same answer. Only the first call does anything.
func (s *Supervisor) notStarted(err error) {
	s.failOnce.Do(func() {
		s.mu.Lock()
		s.startErr = &notStartedError{err}
		s.mu.Unlock()
		s.beginShutdown()
		close(s.ready)
		close(s.stopped)
	})
}

// beginShutdown marks the supervisor shutting down: starts and holds are
// refused from now on, and waits for RUNNING end (woken by a status
// change broadcast).
func (s *Supervisor) beginShutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutting = true
	s.changedLocked()
}

// changedLocked wakes every waiter on s.changed (a status change, the
// start of a shutdown); s.mu is held.
func (s *Supervisor) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// notStartedError answers the calls that waited for a start that failed
// ("supervisor did not start: program web: open log ...: ..."). It is
// ErrShuttingDown, since the supervisor is exiting, and its cause.
type notStartedError struct{ err error }

func (e *notStartedError) Error() string { return "supervisor did not start: " + e.err.Error() }

// Unwrap returns ErrShuttingDown and the start-up error.
func (e *notStartedError) Unwrap() []error { return []error{ErrShuttingDown, e.err} }

// closeServer shuts the control server down (nil: none), giving the
// requests under way a second to answer, then closes what is left
// (a hold, logs followed).
func (s *Supervisor) closeServer(srv *http.Server) {
	if srv == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
	_ = srv.Close()
}

// install runs Options.Install until it succeeds, retrying a failure
// after a backoff StartRetries times (of InstallProgram), but not one
// that wraps ErrNoRetry. It reports
// whether the program may start: false once the last attempt failed (the
// program is then FATAL with the install's error). An install cut short
// by the end of ctx is not a failure. The program loops are not running:
// the install program's proc is touched directly.
func (s *Supervisor) install(ctx context.Context) bool {
	p := s.procs[s.opts.InstallProgram]
	if p == nil {
		s.log.Info("install on start")
		if err := s.opts.Install(ctx, func(string) {}); err != nil {
			s.log.Error("install on start failed; starting the programs anyway", "err", err)
		}
		return true
	}
	for _, q := range s.order {
		if q != p {
			s.setStatus(q.spec.Name, Stopped, "not started: the release is being installed first", false)
		}
	}
	progress := func(detail string) { s.setStatus(p.spec.Name, Starting, detail, false) }
	for attempt := 1; ; attempt++ {
		s.log.Info("install on start", "attempt", attempt, "of", p.spec.StartRetries+1)
		s.setStatus(p.spec.Name, Starting, "installing the release", true)
		err := s.opts.Install(ctx, progress)
		if err == nil || ctx.Err() != nil {
			for _, q := range s.order {
				s.setStatus(q.spec.Name, Stopped, "not started", false)
			}
			return true
		}
		if attempt > p.spec.StartRetries || errors.Is(err, ErrNoRetry) {
			reason := fmt.Sprintf("install failed: %v; gave up after %d attempts", err, attempt)
			if errors.Is(err, ErrNoRetry) {
				reason = fmt.Sprintf("install failed: %v; not retried: %v", err, ErrNoRetry)
			}
			s.log.Error("fatal: install on start failed; not starting the program", "program", p.spec.Name, "reason", reason)
			p.state, p.detail = Fatal, reason
			p.publish(true)
			for _, q := range s.order {
				if q != p {
					s.setStatus(q.spec.Name, Stopped, "not started", false)
				}
			}
			return false
		}
		delay := s.backoff(attempt)
		s.log.Warn("install on start failed; retrying", "err", err, "retry", attempt, "of", p.spec.StartRetries, "in", delay)
		s.setStatus(p.spec.Name, Backoff, fmt.Sprintf("install failed: %v; retry %d of %d in %s", err, attempt, p.spec.StartRetries, delay), true)
		select {
		case <-ctx.Done():
			return true
		case <-time.After(delay):
		}
	}
}

// installFirst runs the install on start, if any (install), and reports
// whether it failed. When ctx ended meanwhile (a shutdown), the
// supervisor is marked shutting down before the loops start and wake
// what waited for the install (waitInstall): those are answered
// ErrShuttingDown, not judged against an install cut short.
func (s *Supervisor) installFirst(ctx context.Context) (failed bool) {
	failed = s.opts.Install != nil && !s.install(ctx)
	if ctx.Err() != nil {
		s.beginShutdown()
	}
	return failed
}

// shuttingDown reports whether shutdown has begun: a start or restart
// then skips the Check (its answer is ErrShuttingDown, whatever the
// release on disk).
func (s *Supervisor) shuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutting
}

// waitInstall waits until the program loops run, that is until the
// install on start (Options.Install) is over, or ctx ends (its error is
// then "wait for the install on start to finish: " and ctx's cause). A
// start or restart (verb) of list asked for while the supervisor installs
// the release first is thus judged, by each program's Check, against what
// the install left, as the same request made a moment later would be:
// waiting, as a start during the install already did and as systemctl
// does for a unit still activating, rather than refusing with "release
// not installed" what the supervisor is installing. That it waits is
// logged once, and so is a ctx ending the wait (a client gone away).
// waited says whether it had to: no program ran when the call came (the
// install runs before any starts), so whatever runs once it returns was
// started after it. When Run did not start (its error after the socket
// was served: a log file it cannot open), the error is
// "supervisor did not start: " and Run's, wrapping ErrShuttingDown,
// for the calls that waited and every later one.
func (s *Supervisor) waitInstall(ctx context.Context, verb string, list []string) (waited bool, err error) {
	select {
	case <-s.ready:
		return false, s.startErr
	default:
	}
	s.log.Info(verb+" waits for the install on start to finish", "programs", list)
	select {
	case <-s.ready:
		return true, s.startErr
	case <-ctx.Done():
		s.log.Info(verb+" gave up waiting for the install on start", "programs", list, "cause", context.Cause(ctx))
		return true, fmt.Errorf("wait for the install on start to finish: %w", context.Cause(ctx))
	}
}

// setStatus sets a program's published state and detail while its loop
// does not run (the install).
func (s *Supervisor) setStatus(name string, st State, detail string, stateChanged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.status[name]
	if stateChanged || cur.State != st {
		cur.Since = time.Now()
	}
	cur.State, cur.detail = st, detail
	s.status[name] = cur
	s.changedLocked()
}

// claim is what Claim took.
type claim struct {
	done       bool
	release    func() // the state lock and markers
	unlockSock func() // the socket's lock
}

// Claim takes what makes s the one supervisor of its configuration:
// StateDir's supervisor.lock (and the programs' markers) and the
// socket's lock (path+".lock"); the socket itself is created by Run. Run
// calls it; a caller that must not act while another supervisor runs
// (recovery before Run) calls it first. The error wraps
// ErrAlreadyRunning, naming the holder, when another supervisor holds
// either; nothing is changed then. Calling it again after a success does
// nothing; what it took is released when Run returns, by Unclaim, or
// when the process exits.
func (s *Supervisor) Claim() error {
	if s.claim.done {
		return nil
	}
	if s.opts.StateDir != "" {
		release, err := s.takeState()
		if err != nil {
			return err
		}
		s.claim.release = release
	}
	if s.opts.Socket != "" {
		unlock, err := lockSocket(s.opts.Socket)
		if err != nil {
			if s.claim.release != nil {
				s.claim.release()
				s.claim.release = nil
			}
			return err
		}
		s.claim.unlockSock = unlock
	}
	s.claim.done = true
	return nil
}

// Unclaim releases what Claim took, for a caller that claimed but will
// not call Run (a start refused after Claim); Run releases it itself.
// Calling it again, or without a claim, does nothing.
func (s *Supervisor) Unclaim() { s.unclaim() }

// unclaim releases what Claim took.
func (s *Supervisor) unclaim() {
	if s.claim.unlockSock != nil {
		s.claim.unlockSock()
	}
	if s.claim.release != nil {
		s.claim.release()
	}
	s.claim = claim{}
}

// errShutdownRequested is the cause of Run's end after Shutdown.
var errShutdownRequested = errors.New("shutdown requested")

// takeState takes StateDir's supervisor lock and opens the programs'
// markers. release closes them and unlocks.
func (s *Supervisor) takeState() (release func(), err error) {
	dir := s.opts.StateDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create supervisor state directory: %w", err)
	}
	lk, err := lock.Acquire(context.Background(), filepath.Join(dir, "supervisor.lock"), "hbx supervise", 0, nil)
	if err != nil {
		if lock.IsLocked(err) {
			return nil, fmt.Errorf("%w: %w", ErrAlreadyRunning, err)
		}
		return nil, err
	}
	release = func() {
		for _, p := range s.order {
			if p.marker != nil {
				p.marker.Close()
				p.markerPin.Close()
			}
		}
		s.closeCgroups()
		_ = lk.Unlock()
	}
	for _, p := range s.order {
		f, err := os.OpenFile(filepath.Join(dir, p.spec.Name+".marker"), os.O_RDONLY|os.O_CREATE, 0o600)
		if err == nil {
			if p.markerPin, err = procscan.PinFile(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			release()
			return nil, fmt.Errorf("program %s: open marker: %w", p.spec.Name, err)
		}
		p.marker = f
	}
	if s.opts.Cgroups {
		s.openCgroups()
	}
	return release, nil
}

// stopLeftovers stops, program by program in stop order, every process
// that holds a program's marker: what a previous supervisor (killed, or
// dead of a signal) left running. Each gets the program's stopsignal,
// then SIGKILL after stopwaitsecs. A process that cannot be stopped fails
// Run: nothing is started beside it.
func (s *Supervisor) stopLeftovers(ctx context.Context) error {
	old, oldMount := s.recordedCgroups()
	for i := len(s.order) - 1; i >= 0; i-- {
		p := s.order[i]
		if p.marker == nil {
			continue
		}
		for _, g := range []*progCgroup{p.cg, oldCgroup(oldMount, old, p.spec.Name)} {
			if err := s.stopCgroupLeftovers(ctx, p, g); err != nil {
				return fmt.Errorf("program %s: stop what a previous supervisor left running: %w", p.spec.Name, err)
			}
		}
		if err := s.stopRecordedGroup(ctx, p); err != nil {
			return fmt.Errorf("program %s: stop what a previous supervisor left running: %w", p.spec.Name, err)
		}
		stopped, killed, err := procscan.Stop(ctx, p.markerPin, p.stopSignal(), p.spec.StopWait, 0)
		for _, q := range stopped {
			s.log.Warn("stopped a process left running by a previous supervisor", "program", p.spec.Name, "pid", q.PID, "command", q.Command, "found_by", "marker", "signal", signalName(p.stopSignal()), "sigkill_after_stopwaitsecs", killed)
		}
		if err != nil {
			return fmt.Errorf("program %s: stop what a previous supervisor left running: %w", p.spec.Name, err)
		}
	}
	if old != "" {
		for _, p := range s.order {
			_ = os.Remove(filepath.Join(old, p.spec.Name))
		}
		_ = os.Remove(old) // fails while another cgroup is left in it
	}
	return nil
}

// groupRecord is the file recording a program's last process group.
func (s *Supervisor) groupRecord(name string) string {
	return filepath.Join(s.opts.StateDir, name+".group")
}

// stopRecordedGroup stops what is left of the process group a previous
// supervisor recorded for p (members that closed the marker are found this
// way): stopsignal to the group, SIGKILL after stopwaitsecs. A group whose
// members started before the recorded leader, or whose leader pid is
// another process, is not the recorded one (the id was reused) and is
// left alone. The members are not this process's children (their parent
// was the previous supervisor): once the last one is reaped elsewhere the
// group's id is free, so each member is signalled by itself, its pid,
// group and start time proven at the signal (signalMembers), never
// through kill(-pgid), which would reach whatever group took the id.
func (s *Supervisor) stopRecordedGroup(ctx context.Context, p *proc) error {
	b, err := os.ReadFile(s.groupRecord(p.spec.Name))
	if err != nil {
		return nil
	}
	var pgid int
	var t0 uint64
	if n, _ := fmt.Sscan(string(b), &pgid, &t0); n != 2 || pgid <= 1 {
		return nil
	}
	members := procscan.Group(pgid)
	if len(members) == 0 {
		return nil
	}
	if !recordedGroup(members, pgid, t0) {
		s.log.Info("the recorded process group of a previous supervisor's program is another one now; left alone", "program", p.spec.Name, "pgid", pgid)
		return nil
	}
	comms := make([]string, len(members))
	for i, m := range members {
		comms[i] = procscan.Comm(m.PID)
	}
	sig := p.stopSignal()
	signalMembers(members, sig)
	killAt := time.Now().Add(p.spec.StopWait)
	var giveUp time.Time
	for {
		left := procscan.Group(pgid)
		if len(left) == 0 || !recordedGroup(left, pgid, t0) {
			break // gone, or gone and its id taken by another group
		}
		now := time.Now()
		if giveUp.IsZero() && !now.Before(killAt) {
			signalMembers(left, syscall.SIGKILL)
			giveUp = now.Add(5 * time.Second)
		}
		if !giveUp.IsZero() && now.After(giveUp) {
			return fmt.Errorf("process group %d still alive after SIGKILL", pgid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stop process group %d: %w", pgid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i, m := range members {
		s.log.Warn("stopped a process left running by a previous supervisor", "program", p.spec.Name, "pid", m.PID, "command", comms[i], "found_by", "process group", "signal", signalName(sig), "sigkill_after_stopwaitsecs", !giveUp.IsZero())
	}
	return nil
}

// recordedGroup reports whether members (of process group pgid) can be
// the group whose leader, pid pgid, started at t0 (clock ticks after
// boot): none started before it, and a member with the leader's pid is
// the leader itself.
func recordedGroup(members []procscan.Stat, pgid int, t0 uint64) bool {
	for _, m := range members {
		if m.StartTime < t0 || m.PID == pgid && m.StartTime != t0 {
			return false
		}
	}
	return true
}

// signalMembers sends sig to each of members that is still the process
// it was when read (the same pid, process group and start time), through
// procscan.Signal: a member that died meanwhile, its pid reused, gets
// nothing.
func signalMembers(members []procscan.Stat, sig syscall.Signal) {
	for _, m := range members {
		procscan.Signal(m.PID, sig, func(pid int) bool {
			st, err := procscan.ReadStat(pid)
			return err == nil && st.PGID == m.PGID && st.StartTime == m.StartTime
		})
	}
}

// Shutdown asks Run to stop everything and return. It does not wait.
func (s *Supervisor) Shutdown() {
	s.shutdownOnce.Do(func() { close(s.shutdownReq) })
}

// killOrphans kills and waits for every process still reparented to the
// supervisor (descendants that left their program's group).
func (s *Supervisor) killOrphans(ctx context.Context) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if time.Now().After(deadline) {
			return
		}
		kids := s.reaper.killChildren()
		if len(kids) == 0 {
			return
		}
		for _, pid := range kids {
			s.log.Warn("killed leftover process", "pid", pid)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// openLogs creates each program's output pipes and the goroutines that
// copy them into the log files. The returned closers close the pipes'
// write ends and the files.
func (s *Supervisor) openLogs(wg *sync.WaitGroup) ([]io.Closer, error) {
	var closers []io.Closer
	fail := func(err error) ([]io.Closer, error) {
		for _, c := range closers {
			c.Close()
		}
		return nil, err
	}
	for _, p := range s.order {
		for i, lf := range []LogFile{p.spec.Stdout, p.spec.Stderr} {
			w, err := newLogWriter(lf)
			if err != nil {
				return fail(fmt.Errorf("program %s: open log %s: %w", p.spec.Name, lf.Path, err))
			}
			pr, pw, err := os.Pipe()
			if err != nil {
				w.Close()
				return fail(fmt.Errorf("program %s: pipe: %w", p.spec.Name, err))
			}
			if i == 0 {
				p.outW = pw
			} else {
				p.errW = pw
			}
			var dst io.Writer = w
			var src io.Reader = pr
			if i == 1 {
				dst = io.MultiWriter(w, &p.errLine)
				p.errLine.src, p.errLine.read = pr, &countingReader{r: pr}
				src = p.errLine.read
			}
			wg.Go(func() {
				if _, err := io.Copy(dst, src); err != nil {
					s.log.Warn("copy program output", "program", p.spec.Name, "err", err)
				}
				pr.Close()
			})
			closers = append(closers, pw, w)
			s.logMu.Lock()
			s.logs = append(s.logs, w)
			s.logMu.Unlock()
		}
	}
	return closers, nil
}

// openLog opens a log file for appending, rotated by lumberjack when
// lf.MaxBytes is set. The supervisor writes it as root: its directory
// and every ancestor must be root's alone (the supervisor's own user's
// when it is not root; pathtrust.Check's rule), and the file itself must
// be absent or a regular file, never followed as a symbolic link
// (O_NOFOLLOW), so no other user can make it append elsewhere.
func openLog(lf LogFile) (io.WriteCloser, error) {
	dir := dirOf(lf.Path)
	if err := pathtrust.Check("log directory", dir, false, ownTrust()); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := openAppendNoFollow(lf.Path)
	if err != nil || lf.MaxBytes == 0 {
		return f, err
	}
	// Checked: a regular file in a directory only trusted users write,
	// so lumberjack's own opens by path meet the same file.
	if err := f.Close(); err != nil {
		return nil, err
	}
	const mib = 1 << 20
	return &lumberjack.Logger{
		Filename:   lf.Path,
		MaxSize:    int((lf.MaxBytes + mib - 1) / mib),
		MaxBackups: lf.Backups,
	}, nil
}

// ownTrust is who may control the supervisor's own files besides root:
// its user and group when it does not run as root.
func ownTrust() pathtrust.Trust {
	var t pathtrust.Trust
	if uid := os.Geteuid(); uid != 0 {
		t.UIDs = []uint32{uint32(uid)}
		t.GIDs = []uint32{uint32(os.Getegid())}
	}
	return t
}

// openAppendNoFollow opens (creating, 0600) path for appending without
// following a symbolic link as its last component or blocking on a FIFO;
// anything but a regular file is refused with ErrLogNotRegular.
func openAppendNoFollow(path string) (*os.File, error) {
	flags := unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	fd, err := unix.Open(path, flags, 0o600)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, notRegularLog(fs.ModeSymlink)
	case errors.Is(err, unix.ENXIO): // a FIFO without a reader, a socket
		return nil, notRegularLog(fs.ModeNamedPipe)
	case errors.Is(err, unix.EISDIR):
		return nil, notRegularLog(fs.ModeDir)
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: file type %#o; remove it", ErrLogNotRegular, st.Mode&unix.S_IFMT)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// notRegularLog is ErrLogNotRegular for a log path of type t (a
// symbolic link, a directory, or any other non-regular type), saying what
// to do about it.
func notRegularLog(t fs.FileMode) error {
	switch {
	case t&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: a symbolic link, which hbx never follows; remove it", ErrLogNotRegular)
	case t.IsDir():
		return fmt.Errorf("%w: a directory; remove it or log to another path", ErrLogNotRegular)
	default:
		return fmt.Errorf("%w: a FIFO, socket or device; remove it", ErrLogNotRegular)
	}
}

// checkLogs checks each program's log files as openLog will, without
// creating or opening anything: the directory's trust (pathtrust.Check)
// and that an existing file is a regular one (Lstat; notRegularLog). Run
// calls it before the install on start, so a bad log path is said at
// once, not after a long install; openLog checks again when it opens.
func (s *Supervisor) checkLogs() error {
	for _, p := range s.order {
		for _, lf := range []LogFile{p.spec.Stdout, p.spec.Stderr} {
			if err := checkLog(lf); err != nil {
				return fmt.Errorf("program %s: open log %s: %w", p.spec.Name, lf.Path, err)
			}
		}
	}
	return nil
}

// checkLog is checkLogs for one log file.
func checkLog(lf LogFile) error {
	if err := pathtrust.Check("log directory", dirOf(lf.Path), false, ownTrust()); err != nil {
		return err
	}
	fi, err := os.Lstat(lf.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil // openLog creates it
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return notRegularLog(fi.Mode().Type())
	}
	return nil
}

func dirOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// lockSocket takes the socket's flock (path+".lock"), held while the
// supervisor lives, so a second one fails with the holder's pid. It
// creates the socket's directory; the socket itself is left alone.
func lockSocket(path string) (unlock func(), err error) {
	if len(path) >= 108 {
		return nil, fmt.Errorf("socket path %s is %d bytes, the limit is 107", path, len(path))
	}
	if err := os.MkdirAll(dirOf(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	lk, err := lock.Acquire(context.Background(), path+".lock", "hbx supervise", 0, nil)
	if err != nil {
		if lock.IsLocked(err) {
			return nil, fmt.Errorf("%w: %w", ErrAlreadyRunning, err)
		}
		return nil, err
	}
	return func() { _ = lk.Unlock() }, nil
}

// listen creates the socket, mode 0600, once its lock is held: a stale
// socket file is removed first.
func listen(path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	return ln, nil
}

// changedChan returns the channel closed at the next status change.
func (s *Supervisor) changedChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// notRunning returns the first of names that is not RUNNING, or "".
func (s *Supervisor) notRunning(names []string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if s.status[n].State != Running {
			return n
		}
	}
	return ""
}

// names expands "all" and checks names. nil means all. The result is in
// priority order, without duplicates.
func (s *Supervisor) names(names []string) []string {
	want := map[string]bool{}
	all := names == nil
	for _, n := range names {
		if n == "all" {
			all = true
		}
		want[n] = true
	}
	var out []string
	for _, p := range s.order {
		if all || want[p.spec.Name] {
			out = append(out, p.spec.Name)
		}
	}
	return out
}

// checkNames returns an error wrapping ErrUnknownProgram naming every
// unknown name, or nil. An empty list is an unknown program too.
func (s *Supervisor) checkNames(names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("%w: no program named (want NAME... or all)", ErrUnknownProgram)
	}
	var bad []string
	for _, n := range names {
		if n != "all" && s.procs[n] == nil {
			bad = append(bad, fmt.Sprintf("%q", n))
		}
	}
	if len(bad) > 0 {
		known := make([]string, 0, len(s.order))
		for _, p := range s.order {
			known = append(known, p.spec.Name)
		}
		return fmt.Errorf("%w: %s (programs: %s)", ErrUnknownProgram, strings.Join(bad, ", "), strings.Join(known, ", "))
	}
	return nil
}

// request sends kind to each program in order, waiting for each to be
// accepted, and returns the channels their outcomes arrive on.
func (s *Supervisor) request(ctx context.Context, kind reqKind, names []string) map[string]chan error {
	out := map[string]chan error{}
	for _, n := range names {
		r := request{kind: kind, accepted: make(chan struct{}), done: make(chan error, 1)}
		select {
		case s.procs[n].reqs <- r:
		case <-s.stopped:
			// Run has stopped everything or did not start: no program
			// loop takes requests any more.
			r.done <- s.stoppedErr()
			out[n] = r.done
			continue
		case <-ctx.Done():
			return out
		}
		<-r.accepted
		out[n] = r.done
	}
	return out
}

// Result is the outcome of a start or stop of one program.
type Result struct {
	Name  string `json:"name"`
	State State  `json:"state"`
	// Error says why the program did not reach the wanted state; empty on
	// success.
	Error string `json:"error,omitempty"`
	// Restart, in a hold's results only, says the hold found the program
	// STARTING, RUNNING or BACKOFF: releasing the hold starts it again.
	Restart bool `json:"restart,omitempty"`
	// Refused, in a start's or restart's results, says the program's
	// Check refused it: it was neither stopped nor started (Error says
	// why, State is its state, unchanged).
	Refused bool `json:"refused,omitempty"`
	// Class is the code of the ErrorClass (Options.ErrorClasses) the
	// refusal's cause belongs to; "" when none or not refused.
	Class string `json:"class,omitempty"`
	// Already, in a start's or stop's results, says the program was in
	// the wanted state (RUNNING, or STOPPED) when asked and still is:
	// nothing was done (supervisorctl's "already started").
	Already bool `json:"already,omitempty"`
}

// results waits for the outcomes and returns one Result per name.
func (s *Supervisor) results(ctx context.Context, names []string, done map[string]chan error, pre map[string]error) []Result {
	var out []Result
	for _, n := range names {
		r := Result{Name: n}
		if err := pre[n]; err != nil {
			r.Error = err.Error()
		} else if ch := done[n]; ch != nil {
			select {
			case err := <-ch:
				if err != nil {
					r.Error = err.Error()
				}
			case <-ctx.Done():
				r.Error = ctx.Err().Error()
			}
		}
		r.State = s.Get(n).State
		out = append(out, r)
	}
	return out
}

// Start starts the named programs ("all" for every one) in priority order
// and waits until each is RUNNING, FATAL or stopped again, or ctx ends.
// Unknown names fail the whole call with ErrUnknownProgram before anything
// happens; a held program gets an ErrHeld Result, every start during
// shutdown an ErrShuttingDown one. A start asked for while the install on
// start runs waits for it to finish (waitInstall). Then the Check of each
// program that is not running (STOPPED, EXITED or FATAL) nor held runs: a
// program it refuses is not started and gets a Result saying so ("start
// NAME: why; nothing started", Refused, Class); when it refuses every
// program named, the call fails with those refusals (refusals).
func (s *Supervisor) Start(ctx context.Context, names ...string) ([]Result, error) {
	if err := s.checkNames(names); err != nil {
		return nil, err
	}
	list := s.names(names)
	if _, err := s.waitInstall(ctx, "start", list); err != nil {
		return nil, err
	}
	var idle []string // not running nor held: what a start would spawn
	for _, n := range list {
		s.mu.Lock()
		held := s.held[n] > 0
		s.mu.Unlock()
		switch s.Get(n).State {
		case Stopped, Exited, Fatal:
			if !held {
				idle = append(idle, n)
			}
		}
	}
	if s.shuttingDown() {
		idle = nil
	}
	refused := s.preflight(ctx, "start", idle)
	ok := without(list, refused)
	if len(ok) == 0 {
		return nil, refusals(list, refused)
	}
	running := s.inState(ok, Running)
	return s.mergeRefused(list, markAlready(s.start(ctx, ok), running, Running), refused), nil
}

// inState returns which of names are in state now.
func (s *Supervisor) inState(names []string, state State) map[string]bool {
	in := map[string]bool{}
	for _, n := range names {
		if s.Get(n).State == state {
			in[n] = true
		}
	}
	return in
}

// markAlready sets Already on each result of a program that was in state
// before the call (was) and is in it still, with no error.
func markAlready(res []Result, was map[string]bool, state State) []Result {
	for i, r := range res {
		res[i].Already = was[r.Name] && r.Error == "" && r.State == state
	}
	return res
}

// start starts list (names in priority order) with no preflight.
func (s *Supervisor) start(ctx context.Context, list []string) []Result {
	pre := map[string]error{}
	var go_ []string
	s.mu.Lock()
	for _, n := range list {
		switch {
		case s.shutting:
			pre[n] = ErrShuttingDown
		case s.held[n] > 0:
			pre[n] = fmt.Errorf("%w: %s is stopped by a hold", ErrHeld, n)
		default:
			go_ = append(go_, n)
		}
	}
	s.mu.Unlock()
	<-s.ready // closed: every caller passed waitInstall
	done := s.request(ctx, reqStart, go_)
	return s.results(ctx, list, done, pre)
}

// Stop stops the named programs ("all" for every one): groups of equal
// priority in descending priority order, each group in parallel. It waits
// until each is STOPPED (its whole process group gone) or ctx ends. A
// stop asked for while the install on start runs waits for it to finish
// (waitInstall; ctx ending the wait fails the call, nothing stopped); a
// shutdown meanwhile answers each program ErrShuttingDown (the shutdown
// stops them).
func (s *Supervisor) Stop(ctx context.Context, names ...string) ([]Result, error) {
	if err := s.checkNames(names); err != nil {
		return nil, err
	}
	list := s.names(names)
	waited, err := s.waitInstall(ctx, "stop", list)
	if err != nil {
		return nil, err
	}
	if waited && s.shuttingDown() {
		return s.start(ctx, list), nil // each ErrShuttingDown
	}
	stopped := s.inState(list, Stopped)
	return markAlready(s.stopGroups(ctx, list), stopped, Stopped), nil
}

// stopGroups stops names (in priority order) group by group, highest
// priority number first.
func (s *Supervisor) stopGroups(ctx context.Context, names []string) []Result {
	byName := map[string]Result{}
	for i := len(names); i > 0; {
		prio := s.procs[names[i-1]].spec.Priority
		j := i - 1
		for j > 0 && s.procs[names[j-1]].spec.Priority == prio {
			j--
		}
		group := names[j:i]
		done := s.request(ctx, reqStop, group)
		for _, r := range s.results(ctx, group, done, nil) {
			byName[r.Name] = r
		}
		i = j
	}
	out := make([]Result, 0, len(names))
	for _, n := range names {
		out = append(out, byName[n])
	}
	return out
}

// Restart stops the named programs, then starts them, like supervisorctl
// restart. A restart asked for while the install on start runs waits for
// it to finish (waitInstall); its effect is one fresh start after the
// request: it starts (as Start) what is not running and does not stop
// what the supervisor spawned since the request (autostart), as
// systemctl's restart of a unit still activating and supervisorctl's
// restart do not boot a program twice; a program the autostart spawned
// before the request (it came as the later ones were being started) is
// restarted.
// Then each program's Check runs, in priority order: a program
// it refuses is neither stopped nor started and gets a Result saying so
// ("restart NAME: why; nothing stopped", Refused, Class), the others are
// restarted; when it refuses every program named, the call fails with
// those refusals (a *RefusedError, or several joined; each wraps
// ErrRefused) and nothing is stopped.
func (s *Supervisor) Restart(ctx context.Context, names ...string) ([]Result, error) {
	if err := s.checkNames(names); err != nil {
		return nil, err
	}
	list, asked := s.names(names), time.Now()
	waited, err := s.waitInstall(ctx, "restart", list)
	if err != nil {
		return nil, err
	}
	if s.shuttingDown() {
		return s.start(ctx, list), nil // each ErrShuttingDown
	}
	refused := s.preflight(ctx, "restart", list)
	ok := without(list, refused)
	if len(ok) == 0 {
		return nil, refusals(list, refused)
	}
	stop := ok
	if waited { // a process spawned since the request satisfies it
		stop = s.spawnedBefore(ok, asked)
		s.log.Info("restart after the install on start: a start satisfies it", "programs", ok, "restarting", stop)
	}
	stopErr := map[string]string{}
	for _, r := range s.stopGroups(ctx, stop) {
		stopErr[r.Name] = r.Error
	}
	started := s.start(ctx, ok)
	for i := range started {
		if started[i].Error == "" {
			started[i].Error = stopErr[started[i].Name]
		}
	}
	return s.mergeRefused(list, started, refused), nil
}

// spawnedBefore lists those of names (in order) whose current process
// was spawned before t: an autostart forked before a restart waiting for
// the install was asked for (the supervisor is ready only once every
// autostart is sent), which the restart must still restart.
func (s *Supervisor) spawnedBefore(names []string, t time.Time) []string {
	var out []string
	for _, n := range names {
		if st := s.Get(n); st.PID != 0 && st.Started.Before(t) {
			out = append(out, n)
		}
	}
	return out
}

// Hold stops the named programs (as Stop) and keeps them from being
// started until release is called; release then starts again, in priority
// order, those the hold found STARTING, RUNNING or BACKOFF (their
// Result.Restart is true), unless another
// hold still holds them or the supervisor is shutting down. release does
// not wait for them to be RUNNING and may be called more than once. A
// hold asked for while the install on start runs waits for it to finish
// (waitInstall; ctx ending the wait fails the call, nothing held). A
// hold during shutdown, also one that waited, fails with ErrShuttingDown,
// nothing held: the supervisor is about to exit, and its exit would end
// the hold. So does one waiting for a start that failed (Run's error,
// "supervisor did not start: ...").
func (s *Supervisor) Hold(ctx context.Context, names ...string) (stopped []Result, release func(), err error) {
	if err := s.checkNames(names); err != nil {
		return nil, nil, err
	}
	list := s.names(names)
	if _, err := s.waitInstall(ctx, "hold", list); err != nil {
		return nil, nil, err
	}
	var active []string
	s.mu.Lock()
	if s.shutting {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("hold %s: %w: try again once it has stopped", strings.Join(list, ", "), ErrShuttingDown)
	}
	for _, n := range list {
		s.held[n]++
		if s.status[n].State.HoldRestarts() {
			active = append(active, n)
		}
	}
	s.mu.Unlock()
	s.log.Info("hold", "programs", list)
	var once sync.Once
	release = func() {
		once.Do(func() {
			var again []string
			s.mu.Lock()
			for _, n := range list {
				s.held[n]--
				if s.held[n] == 0 && !s.shutting && slices.Contains(active, n) {
					again = append(again, n)
				}
			}
			s.mu.Unlock()
			s.log.Info("hold released", "programs", list, "starting", again)
			s.request(s.ctx, reqStart, again)
		})
	}
	stopped = s.stopGroups(ctx, list)
	for i := range stopped {
		stopped[i].Restart = slices.Contains(active, stopped[i].Name)
	}
	return stopped, release, nil
}

// Status describes one program.
type Status struct {
	Name     string    `json:"name"`
	State    State     `json:"state"`
	Priority int       `json:"priority"`
	PID      int       `json:"pid,omitempty"`
	Since    time.Time `json:"since"`            // when the state was entered
	Started  time.Time `json:"started,omitzero"` // when the current process was spawned
	Held     bool      `json:"held,omitempty"`   // stopped by a hold
	Detail   string    `json:"detail,omitempty"` // like supervisorctl's description
	// Unhealthy is, for a RUNNING program with a Probe, the failure of
	// its last probe (run every HealthInterval while RUNNING: a liveness
	// check, such as Hermes's state file gone stale); "" once one passes.
	Unhealthy string `json:"unhealthy,omitempty"`
	detail    string
	waiting   string
	// drainFrom and killAt: since when the processes of waiting have
	// been signalled, and when they get (or got) SIGKILL; zero when no
	// termination is under way.
	drainFrom, killAt time.Time
}

// Get returns the status of the named program (zero Status if unknown).
func (s *Supervisor) Get(name string) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.describe(s.status[name])
}

// Status returns every program's status in priority order.
func (s *Supervisor) Status() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, len(s.order))
	for _, p := range s.order {
		out = append(out, s.describe(s.status[p.spec.Name]))
	}
	return out
}

// Info is what the supervisor says about itself, beside its programs'
// Status (GET /v1/info, Client.Info).
type Info struct {
	// PID is the supervisor's process id.
	PID int `json:"pid"`
	// NotSubreaper is empty when the supervisor is a child subreaper (or
	// PID 1); else why it is not and what still holds, one line.
	NotSubreaper string `json:"not_subreaper,omitempty"`
	// Cgroups is the cgroup v2 subtree holding one cgroup per program
	// (cgroup.go), "" without one.
	Cgroups string `json:"cgroups,omitempty"`
	// NoCgroups says why programs run without cgroups and what that
	// leaves unseen; "" when they have them or no StateDir is set.
	NoCgroups string `json:"no_cgroups,omitempty"`
}

// Info reports the supervisor's pid and whether it could become a child
// subreaper (known once Run has started).
func (s *Supervisor) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.info
	in.PID = os.Getpid()
	return in
}

// StoppedTime is the layout of a stopped program's Detail: the time it
// stopped, local time, as supervisorctl status prints it ("Dec 02 01:23
// PM").
const StoppedTime = "Jan 02 03:04 PM"

// describe fills Detail and Held; s.mu is held.
func (s *Supervisor) describe(st Status) Status {
	st.Held = s.held[st.Name] > 0
	switch {
	case st.State == Running && st.PID != 0 && !st.Started.IsZero():
		st.Detail = fmt.Sprintf("pid %d, uptime %s", st.PID, Uptime(time.Since(st.Started)))
	case st.PID != 0 && st.detail != "":
		st.Detail = fmt.Sprintf("pid %d, %s", st.PID, st.detail)
	case st.State == Stopped && st.detail == "" && !st.Since.IsZero():
		// A plain stop: when, as supervisorctl says it (the state
		// already says "stopped").
		st.Detail = st.Since.Local().Format(StoppedTime)
	default:
		st.Detail = st.detail
	}
	if st.Unhealthy != "" {
		st.Detail += "; not live: " + st.Unhealthy
	}
	if st.waiting != "" {
		st.Detail += "; waiting for " + st.waiting + " to exit" + drainTimes(st.drainFrom, st.killAt, time.Now())
	}
	if st.Held {
		st.Detail = strings.TrimSpace(st.Detail + " (held)")
	}
	return st
}

// drainTimes says how long a termination begun at from has lasted by now
// and when its SIGKILL is (or was) due: " (for 0.12s; SIGKILL in 0.08s)";
// "" when from is zero.
func drainTimes(from, killAt, now time.Time) string {
	if from.IsZero() {
		return ""
	}
	s := fmt.Sprintf(" (for %s; ", seconds(now.Sub(from)))
	if now.Before(killAt) {
		return s + "SIGKILL in " + seconds(killAt.Sub(now)) + ")"
	}
	return s + "SIGKILL sent)"
}

// seconds renders d in seconds with two decimals: "0.12s".
func seconds(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// Uptime renders d as supervisorctl does: "H:MM:SS", with "N days, " in
// front past a day.
func Uptime(d time.Duration) string {
	d = d.Round(time.Second)
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	s := fmt.Sprintf("%d:%02d:%02d", d/time.Hour, d%time.Hour/time.Minute, d%time.Minute/time.Second)
	if days > 0 {
		s = fmt.Sprintf("%d days, %s", days, s)
	}
	return s
}

// WaitRunning waits until every named program ("all": every one) is
// RUNNING at once (Executor's RUNNING means its readiness probe passed)
// and returns their statuses in priority order. It fails at once,
// wrapping ErrFatal, when one is FATAL; wrapping ErrShuttingDown when
// the supervisor is shutting down or did not start (nothing will start
// again); and with ctx's error (saying the last state of the first
// program not RUNNING) when ctx ends; unknown names wrap
// ErrUnknownProgram.
func (s *Supervisor) WaitRunning(ctx context.Context, names ...string) ([]Status, error) {
	if err := s.checkNames(names); err != nil {
		return nil, err
	}
	list := s.names(names)
	for {
		s.mu.Lock()
		ch, waiting := s.changed, ""
		out := make([]Status, 0, len(list))
		for _, n := range list {
			st := s.describe(s.status[n])
			out = append(out, st)
			if st.State == Fatal {
				s.mu.Unlock()
				return out, fmt.Errorf("%w: %s: %s", ErrFatal, n, st.Detail)
			}
			if st.State != Running && waiting == "" {
				waiting = fmt.Sprintf("%s is %s", n, st.State)
			}
		}
		shutting, startErr := s.shutting, s.startErr
		s.mu.Unlock()
		switch {
		case waiting == "":
			return out, nil
		case startErr != nil:
			return out, startErr
		case shutting:
			return out, fmt.Errorf("%w (%s)", ErrShuttingDown, waiting)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return out, fmt.Errorf("wait for %s to be RUNNING: %w (%s)", strings.Join(list, ", "), ctx.Err(), waiting)
		}
	}
}

// WaitState waits until the named program is in one of states or ctx
// ends. Once Run has stopped everything, or did not start, no state
// changes any more: it answers at once, with ErrShuttingDown (and why Run
// did not start) when the program is not in one of states. Tests and
// tools use it.
func (s *Supervisor) WaitState(ctx context.Context, name string, states ...State) (Status, error) {
	for {
		s.mu.Lock()
		st, ch := s.status[name], s.changed
		s.mu.Unlock()
		if slices.Contains(states, st.State) {
			return s.Get(name), nil
		}
		select {
		case <-s.stopped:
			if st := s.Get(name); !slices.Contains(states, st.State) {
				return st, fmt.Errorf("wait for %s to be %v: %w (it is %s)", name, states, s.stoppedErr(), st.State)
			}
		case <-ch:
		case <-ctx.Done():
			return s.Get(name), fmt.Errorf("wait for %s to be %v: %w (it is %s)", name, states, ctx.Err(), st.State)
		}
	}
}

// stoppedErr is the answer to a call made once s.stopped is closed: why
// Run did not start (a *notStartedError, which is ErrShuttingDown too),
// or ErrShuttingDown.
func (s *Supervisor) stoppedErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.startErr != nil {
		return s.startErr
	}
	return ErrShuttingDown
}
