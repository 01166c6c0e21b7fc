package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The checks, by the names they have in reports and in --only, in the
// order they run and are reported.
const (
	CheckAPIHealth  = "api-health" // GET /api/health: 200, JSON with "status": "ok"
	CheckWebUI      = "web-ui"     // GET /: 200, an HTML page
	CheckMCPAuth    = "mcp-auth"   // POST /mcp without a key: 401, Bearer challenge
	CheckMCPTools   = "mcp-tools"  // MCP session with the key: exactly the expected tools
	CheckSupervisor = "supervisor" // every supervised program RUNNING
	CheckRelease    = "release"    // the active release is the configured one
	CheckListeners  = "listeners"  // the executor's tree listens on loopback only
	CheckDataDir    = "data-dir"   // the data directory: owner, mode 0700 or stricter
)

// ErrUnknownCheck is wrapped by Run's error for a name that is no check.
var ErrUnknownCheck = errors.New("no such check")

// ErrFailed is wrapped by Report.Err when a check failed.
var ErrFailed = errors.New("failed")

// DefaultTimeout bounds each check when Options.Timeout is 0.
const DefaultTimeout = 5 * time.Second

// Status is the outcome of one check, or of a whole report.
type Status string

// The outcomes. A report passes when no check failed; skips do not fail it.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip" // the check could not apply; Reason says why
)

// Result is the outcome of one check.
type Result struct {
	Name     string        // one of the Check* names
	Status   Status        // Pass, Fail or Skip
	Reason   string        // one line: what was found, or why it failed or was skipped
	Duration time.Duration // how long the check took
	err      error         // the check's error when it failed (Cause)
}

// Cause is the error that made the check fail (a *ToolsError for
// mcp-tools listing another set), nil when it passed or was skipped.
func (r Result) Cause() error {
	if r.Status != Fail {
		return nil
	}
	return r.err
}

// MarshalJSON encodes r as {"name", "status", "reason", "duration_ms"},
// the duration in whole milliseconds.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name       string `json:"name"`
		Status     Status `json:"status"`
		Reason     string `json:"reason"`
		DurationMS int64  `json:"duration_ms"`
	}{r.Name, r.Status, r.Reason, r.Duration.Milliseconds()})
}

// Report is the outcome of a run: Status is Fail when any check failed,
// else Pass. Checks are in the order of Names. Its JSON encoding is the
// one `hbx health --json` prints: {"status", "checks": [...]}.
type Report struct {
	Status Status   `json:"status"`
	Checks []Result `json:"checks"`
}

// Err returns nil when no check of r failed, else an error wrapping
// ErrFailed that names the failed checks: "failed: api-health, release".
// When a supervised program is FATAL it also wraps ErrFatal and says
// which, with the supervisor's reason: "failed: supervisor, api-health;
// executor FATAL (exited too quickly)".
func (r *Report) Err() error {
	if r.Status != Fail {
		return nil
	}
	if cause := r.supervisorCause(); errors.Is(cause, ErrFatal) {
		return fmt.Errorf("%w: %s; %w", ErrFailed, strings.Join(r.Failed(), ", "), cause)
	}
	return fmt.Errorf("%w: %s", ErrFailed, strings.Join(r.Failed(), ", "))
}

// Failed returns the names of the failed checks, in order.
func (r *Report) Failed() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c.Name)
		}
	}
	return out
}

// Options says what the checks check and how.
type Options struct {
	// Listen and Port are Executor's configured listen address (an IP
	// literal, loopback unless Network) and port: the HTTP checks' target
	// (loopback for 0.0.0.0 and ::) and the listener that must exist.
	Listen string
	Port   int
	// Network says Executor is exposed to the network
	// (executor.exposure network): check listeners wants exactly
	// Listen:Port ([ListenersExact]) and every readiness probe ([Ready])
	// also runs check mcp-auth, so an open /mcp is never ready.
	Network bool
	// Timeout bounds each check, network requests included; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Key is the MCP bearer key; when zero, KeyFile is read (ReadKeyFile)
	// at each run; with neither, check mcp-tools is skipped.
	Key     Key
	KeyFile string
	// Tools are exactly the tool names tools/list must return.
	Tools []string
	// Release is what the active release must be.
	Release ReleaseWant
	// DataDir is Executor's data directory; DataDirOwner the user name or
	// uid that must own it.
	DataDir      string
	DataDirOwner string
	// Supervisor reports the supervised programs; nil skips check
	// supervisor and makes check listeners use PidFile.
	Supervisor Supervisor
	// Programs are the enabled programs of the configuration, all of
	// which the supervisor must run.
	Programs []string
	// ExecutorProgram is the executor's program name under the
	// supervisor ("executor").
	ExecutorProgram string
	// PidFile is the pidfile `hbx run executor` writes: where check
	// listeners finds the executor when no supervisor runs.
	PidFile string
	// Logger receives a record per failed check and per attempt of Wait;
	// nil discards. It never receives the key.
	Logger *slog.Logger
}

// check is one named check: it returns the reason for a pass, a skip (an
// error wrapping errSkip) or a failure (any other error).
type check struct {
	name string
	run  func(ctx context.Context, o *Options) (string, error)
}

// errSkip marks a check's error as a skip.
var errSkip = errors.New("skip")

// skipf returns a skip with the formatted reason.
func skipf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errSkip}, args...)...)
}

// notOfferedSkip is check api-health's skip when /api/health is not
// offered: it wraps errSkip and ErrNotOffered.
type notOfferedSkip struct{ reason string }

// Error is the skip's reason after "skip: ".
func (e *notOfferedSkip) Error() string { return errSkip.Error() + ": " + e.reason }

// Unwrap returns errSkip and ErrNotOffered.
func (e *notOfferedSkip) Unwrap() []error { return []error{errSkip, ErrNotOffered} }

// checks lists every check in order.
var checks = []check{
	{CheckAPIHealth, func(ctx context.Context, o *Options) (string, error) {
		key, why := o.optionalKey()
		u := o.url("/api/health")
		status, err := apiHealth(ctx, u, key)
		if errors.Is(err, ErrNotOffered) {
			return "", &notOfferedSkip{fmt.Sprintf("%s (readiness falls back to %s)", reasonOf(err, ErrUnhealthy), o.fallback())}
		}
		if err != nil {
			return "", notSent(err, why)
		}
		return fmt.Sprintf("GET %s%s: 200, status %s", u, withKey(key), status), nil
	}},
	{CheckWebUI, func(ctx context.Context, o *Options) (string, error) {
		key, why := o.optionalKey()
		u := o.url("/")
		if err := webUI(ctx, u, key); err != nil {
			return "", notSent(err, why)
		}
		return fmt.Sprintf("GET %s%s: 200, an HTML page", u, withKey(key)), nil
	}},
	{CheckMCPAuth, func(ctx context.Context, o *Options) (string, error) {
		u := o.url("/mcp")
		challenge, err := mcpAuth(ctx, u)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("POST %s without a key: 401, WWW-Authenticate: %s", u, challenge), nil
	}},
	{CheckMCPTools, func(ctx context.Context, o *Options) (string, error) {
		key, err := o.key()
		if err != nil {
			return "", err
		}
		if key.IsZero() {
			return "", skipf("no MCP key: set health.token_file or pass the key on standard input with --token-stdin")
		}
		u := o.url("/mcp")
		got, err := MCPTools(ctx, u, key)
		if err != nil {
			return "", err
		}
		if d := CompareTools(got, o.Tools); d != "" {
			return "", &ToolsError{URL: u, Diff: d, Listed: got, Want: o.Tools}
		}
		return fmt.Sprintf("tools/list at %s: %s", u, strings.Join(got, ", ")), nil
	}},
	{CheckSupervisor, func(ctx context.Context, o *Options) (string, error) {
		if o.Supervisor == nil {
			return "", skipf("no supervisor is configured")
		}
		progs, err := o.Supervisor.Programs(ctx)
		if errors.Is(err, ErrNoSupervisor) {
			return "", fmt.Errorf("%w: %w", errSkip, err)
		}
		if err != nil {
			return "", err
		}
		return checkPrograms(progs, o.Programs)
	}},
	{CheckRelease, func(_ context.Context, o *Options) (string, error) {
		if o.Release.Change != nil {
			if err := o.Release.Change(); err != nil {
				return "", err
			}
		}
		inst, err := Release(o.Release)
		if err != nil {
			return "", err
		}
		m := inst.Meta
		pin := "manifest pinned"
		if o.Release.ManifestDigest == "" {
			pin = "manifest not pinned for " + m.Platform
		}
		deep := ""
		if o.Release.Deep {
			deep = "; manifest.json and config.json re-hashed"
		}
		return fmt.Sprintf("manifest %s (%s, index %s), %s%s", m.ManifestDigest, m.Platform, m.IndexDigest, pin, deep), nil
	}},
	{CheckListeners, func(ctx context.Context, o *Options) (string, error) {
		pid, from, err := executorPID(ctx, o)
		if err != nil {
			return "", err
		}
		want := o.listenAddr()
		listeners := Listeners
		if o.Network {
			listeners = ListenersExact
		}
		ls, err := listeners(pid, want)
		if err != nil {
			return "", fmt.Errorf("executor pid %d (from %s): %s", pid, from, reasonOf(err, ErrUnhealthy))
		}
		return fmt.Sprintf("executor pid %d (from %s) and its tree listen on %s", pid, from, DescribeTree(ls, want)), nil
	}},
	{CheckDataDir, func(_ context.Context, o *Options) (string, error) {
		mode, err := DataDir(o.DataDir, o.DataDirOwner)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: a directory of mode %04o owned by %s", o.DataDir, mode.Perm(), o.DataDirOwner), nil
	}},
}

// Names returns every check name in run order.
func Names() []string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.name
	}
	return out
}

// key returns Key, else the key of KeyFile (read now), else the zero Key.
func (o *Options) key() (Key, error) {
	if !o.Key.IsZero() || o.KeyFile == "" {
		return o.Key, nil
	}
	return ReadKeyFile(o.KeyFile)
}

// optionalKey is key for the checks that send the key when they can
// (api-health, web-ui): a key file that cannot be read gives the zero Key
// and why, which a failure of the check reports, so a payload that needs
// no key is not judged by the key file.
func (o *Options) optionalKey() (Key, string) {
	k, err := o.key()
	if err != nil {
		return Key{}, reasonOf(err, ErrKey)
	}
	return k, ""
}

// notSent adds to err, when why is set, that the key was not sent and why.
func notSent(err error, why string) error {
	if why == "" {
		return err
	}
	return fmt.Errorf("%w (no key sent: %s)", err, why)
}

// withKey is " with the key" for a reason when key is set.
func withKey(key Key) string {
	if key.IsZero() {
		return ""
	}
	return " with the key"
}

// url returns Executor's URL for path: on Listen, or on loopback when
// Listen is the unspecified address (0.0.0.0 or ::), which listens there
// too.
func (o *Options) url(path string) string {
	host := o.Listen
	if a, err := netip.ParseAddr(host); err == nil && a.IsUnspecified() {
		host = "127.0.0.1"
		if a.Is6() {
			host = "::1"
		}
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(o.Port)), Path: path}).String()
}

// listenAddr is the configured listen address, or the zero AddrPort when
// Listen does not parse.
func (o *Options) listenAddr() netip.AddrPort {
	a, err := netip.ParseAddr(o.Listen)
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a, uint16(o.Port))
}

// Run runs the checks named in only (all of them when only is empty)
// concurrently, each bounded by opts.Timeout, and returns their report in
// the order of Names. A check that does not return within its timeout
// (and one more second) is reported failed and abandoned. Errors: a name
// that is no check (wrapping ErrUnknownCheck, before any check runs), or
// ctx's error when it ended during the run.
func Run(ctx context.Context, opts Options, only []string) (*Report, error) {
	sel, err := selectChecks(only)
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := &Report{Status: Pass, Checks: make([]Result, len(sel))}
	var wg sync.WaitGroup
	for i, c := range sel {
		wg.Go(func() { rep.Checks[i] = runOne(ctx, &opts, c) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, r := range rep.Checks {
		if r.Status == Fail {
			rep.Status = Fail
			log.Debug("check failed", "check", r.Name, "reason", r.Reason)
		}
	}
	return rep, nil
}

// selectChecks returns the checks named in only, in run order; all of
// them for an empty only.
func selectChecks(only []string) ([]check, error) {
	if len(only) == 0 {
		return checks, nil
	}
	for _, n := range only {
		if !slices.ContainsFunc(checks, func(c check) bool { return c.name == n }) {
			return nil, fmt.Errorf("%w: %q (want one of %s)", ErrUnknownCheck, n, strings.Join(Names(), ", "))
		}
	}
	var out []check
	for _, c := range checks {
		if slices.Contains(only, c.name) {
			out = append(out, c)
		}
	}
	return out, nil
}

// runOne runs c with the timeout and turns its outcome into a Result.
func runOne(ctx context.Context, o *Options, c check) Result {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	type outcome struct {
		reason string
		err    error
	}
	done := make(chan outcome, 1)
	go func() {
		reason, err := c.run(cctx, o)
		done <- outcome{reason, err}
	}()
	var out outcome
	select {
	case out = <-done:
	case <-time.After(o.Timeout + time.Second):
		out.err = fmt.Errorf("did not finish within %s", o.Timeout)
	}
	r := Result{Name: c.name, Status: Pass, Reason: out.reason, Duration: time.Since(start)}
	switch {
	case errors.Is(out.err, errSkip):
		r.Status, r.Reason = Skip, reasonOf(out.err, errSkip)
	case out.err != nil:
		r.Status, r.Reason, r.err = Fail, reasonOf(out.err, ErrUnhealthy), out.err
	}
	return r
}

// reasonOf renders err on one line without the leading "<prefix>: " a
// wrapped sentinel adds.
func reasonOf(err, prefix error) string {
	s := strings.TrimPrefix(err.Error(), prefix.Error()+": ")
	return strings.Join(strings.Fields(s), " ")
}

// quoteList renders names as "a", "b".
func quoteList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// Wait runs the checks like Run, again and again every interval (0 means
// 500ms), until a run passes or d has passed since the call (d 0: one
// run), or at once when a supervised program is FATAL (the supervisor
// check's error is ErrFatal: only an operator's start mends it, as the
// supervisor's own wait for RUNNING says); it returns the last report. It logs at info level when the set of failing checks
// changes, at debug level for every other attempt. Errors are Run's;
// when ctx ends, Wait returns ctx's error with the report of the last
// finished run (nil when none finished), so a caller bounded by ctx can
// still say which checks failed and why.
func Wait(ctx context.Context, opts Options, only []string, d, interval time.Duration) (*Report, error) {
	return wait(ctx, opts, only, d, interval, func(rep *Report) bool { return !fatal(rep) })
}

// WaitStart is Wait that retries only while the supervisor is making
// progress: the supervisor check failed with ErrStarting (a program
// STARTING or BACKOFF, e.g. installing the release on start). Any other
// failure, a FATAL program among them, ends it at once, so a container's
// healthcheck can wait out a first pull and still fail within seconds.
// Without the supervisor check among only it runs once.
func WaitStart(ctx context.Context, opts Options, only []string, d, interval time.Duration) (*Report, error) {
	return wait(ctx, opts, only, d, interval, starting)
}

// fatal reports whether rep's supervisor check failed with ErrFatal.
func fatal(rep *Report) bool { return errors.Is(rep.supervisorCause(), ErrFatal) }

// supervisorCause is the error of rep's supervisor check, nil when it did
// not fail or did not run.
func (r *Report) supervisorCause() error {
	for _, c := range r.Checks {
		if c.Name == CheckSupervisor {
			return c.Cause()
		}
	}
	return nil
}

// starting reports whether rep's supervisor check failed with ErrStarting.
func starting(rep *Report) bool {
	for _, c := range rep.Checks {
		if c.Name == CheckSupervisor && errors.Is(c.Cause(), ErrStarting) {
			return true
		}
	}
	return false
}

// wait is Wait, retrying a failed run only when retry says so.
func wait(ctx context.Context, opts Options, only []string, d, interval time.Duration, retry func(*Report) bool) (*Report, error) {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	deadline := time.Now().Add(d)
	last := ""
	var prev *Report
	for attempt := 1; ; attempt++ {
		rep, err := Run(ctx, opts, only)
		if err != nil {
			if ctx.Err() != nil {
				return prev, err
			}
			return nil, err
		}
		prev = rep
		left := time.Until(deadline)
		if rep.Status == Pass || left <= 0 || !retry(rep) {
			return rep, nil
		}
		failed := strings.Join(rep.Failed(), ", ")
		level := slog.LevelDebug
		if failed != last {
			level = slog.LevelInfo
		}
		last = failed
		log.Log(ctx, level, "health: not yet", "attempt", attempt, "failing", failed, "left", left.Round(time.Second))
		t := time.NewTimer(min(interval, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return rep, ctx.Err()
		case <-t.C:
		}
	}
}
