package health

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Readiness names the check that says a started payload is ready and,
// while it runs, still alive: the supervisor's readiness gate and wedge
// probe, the waits of backup, restore and upgrade (health.readiness).
// Each is the code of the check of the same name.
const (
	// ReadyAPIHealth: GET /api/health answers 200 with status "ok"; the
	// bearer key goes with the request when one is configured, so a
	// payload that answers 401 on every path without its key is judged by
	// its answer with it. The default: it fits the pinned self-host image,
	// whose /api/health needs no key, and the CLI edition with
	// health.token_file set.
	ReadyAPIHealth = CheckAPIHealth
	// ReadyMCPAuth: POST /mcp without a key answers 401 with a Bearer
	// challenge. For a payload without /api/health.
	ReadyMCPAuth = CheckMCPAuth
	// ReadyMCPTools: an MCP session with the key lists exactly the
	// expected tools. Needs a key.
	ReadyMCPTools = CheckMCPTools
)

// Readiness lists the names Ready accepts, the default first.
var Readiness = []string{ReadyAPIHealth, ReadyMCPAuth, ReadyMCPTools}

// ErrNoKey is wrapped by the error of a probe that needs the MCP key
// when none is configured.
var ErrNoKey = errors.New("no MCP key")

// Ready returns the probe named (one of Readiness): it runs the check of
// that name once with o (o.Timeout is not applied; ctx bounds it) and
// returns nil when it passes, else its error, which wraps ErrUnhealthy
// for an unhealthy answer and ErrKey for an unreadable key file. A check
// that would skip (mcp-tools without a key) fails wrapping ErrNoKey. A
// name that is no readiness is an error wrapping ErrUnknownCheck, before
// any probe runs. When /api/health is not offered (404 or 405,
// ErrNotOffered), api-health falls back to what the payload offers:
// mcp-tools with a key configured (o.Key or o.KeyFile), mcp-auth without
// one; a 200 "degraded", a 5xx or a timeout stay unhealthy. With o.Network
// the probe also runs check mcp-auth
// after the one named: an Executor exposed to the network whose /mcp
// answers without a key is never ready.
func Ready(o Options, name string) (func(ctx context.Context) error, error) {
	if !slices.Contains(Readiness, name) {
		return nil, fmt.Errorf("%w: readiness %q (want one of %s)", ErrUnknownCheck, name, strings.Join(Readiness, ", "))
	}
	i := slices.IndexFunc(checks, func(c check) bool { return c.name == name })
	c := checks[i]
	gate := checks[slices.IndexFunc(checks, func(c check) bool { return c.name == CheckMCPAuth })]
	return func(ctx context.Context) error {
		_, err := c.run(ctx, &o)
		if name == ReadyAPIHealth && errors.Is(err, errSkip) {
			err = o.readyFallback(ctx, err)
		}
		if errors.Is(err, errSkip) {
			return fmt.Errorf("%w: %w: readiness %s needs one (health.token_file)", ErrUnhealthy, ErrNoKey, name)
		}
		if err != nil || !o.Network || name == CheckMCPAuth {
			return err
		}
		// Exposed to the network, the bearer gate is part of readiness.
		if _, err := gate.run(ctx, &o); err != nil {
			return fmt.Errorf("bearer gate (executor.exposure network): %w", err)
		}
		return nil
	}, nil
}

// ReadyProcess is the supervisor's readiness gate and wedge probe of the
// payload whose process (tree) is pid: the readiness check name (Ready),
// then check listeners: every TCP listener of pid's process tree is on
// loopback, o.Listen:o.Port among them (with o.Network: exactly
// o.Listen:o.Port, ListenersExact). So a payload that listens on 0.0.0.0
// never passes unless exposed on purpose. tools, when not nil, gives the tool names
// mcp-tools expects at each call (the set pinned with the running image);
// o.Tools otherwise. pid 0 fails wrapping ErrUnhealthy; a name that is no
// readiness is an error as for Ready.
func ReadyProcess(o Options, name string, tools func() []string) (func(ctx context.Context, pid int) error, error) {
	ready, err := Ready(o, name)
	if err != nil {
		return nil, err
	}
	var want netip.AddrPort
	if a, err := netip.ParseAddr(o.Listen); err == nil {
		want = netip.AddrPortFrom(a, uint16(o.Port))
	}
	return func(ctx context.Context, pid int) error {
		r := ready
		if tools != nil && name != ReadyMCPAuth { // mcp-tools, or api-health's fallback
			c := o
			c.Tools = tools()
			var err error // this call's own: the closure may run concurrently
			if r, err = Ready(c, name); err != nil {
				return err
			}
		}
		if err := r(ctx); err != nil {
			return err
		}
		if pid == 0 {
			return fmt.Errorf("%w: executor has no pid", ErrUnhealthy)
		}
		if o.Network {
			_, err := ListenersExact(pid, want)
			return err
		}
		_, err := Listeners(pid, want)
		return err
	}, nil
}

// fallback names the check readiness api-health falls back to when
// /api/health is not offered: mcp-tools with a key configured, else
// mcp-auth.
func (o *Options) fallback() string {
	if !o.Key.IsZero() || o.KeyFile != "" {
		return CheckMCPTools
	}
	return CheckMCPAuth
}

// readyFallback runs, for readiness api-health whose check was skipped
// with skip because /api/health is not offered, the check fallback
// names; it returns skip unchanged for any other skip. Its error names
// both.
func (o *Options) readyFallback(ctx context.Context, skip error) error {
	if !errors.Is(skip, ErrNotOffered) {
		return skip
	}
	name := o.fallback()
	c := checks[slices.IndexFunc(checks, func(c check) bool { return c.name == name })]
	_, err := c.run(ctx, o)
	if err != nil && !errors.Is(err, errSkip) {
		err = fmt.Errorf("%w (GET /api/health: not offered; readiness falls back to %s)", err, name)
		if !errors.Is(err, ErrUnhealthy) {
			err = fmt.Errorf("%w: %w", ErrUnhealthy, err)
		}
	}
	return err
}
