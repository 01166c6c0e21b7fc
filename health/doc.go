// Package health checks that the box works: the acceptance checks of
// `hbx health`, run by [Run] (once) or [Wait] (until they pass), each
// reported as pass, fail or skip with a one-line reason and its duration.
//
// The checks, in order (names as in reports and --only):
//
//   - api-health: GET /api/health answers 200 with a JSON object whose
//     "status" is the string "ok" ([APIHealth], [APIHealthKey]). Any other
//     status fails, named in the reason: Executor answers 200 with
//     {"status":"degraded"} when its database fails.
//   - web-ui: GET / answers 200 with an HTML page ([WebUI]).
//   - mcp-auth: an MCP initialize request without credentials answers 401
//     with a WWW-Authenticate header offering the Bearer scheme, and one
//     with a made-up Bearer key is refused too ([MCPAuth]).
//   - mcp-tools: with the bearer key, an MCP session (the official Go SDK,
//     streamable HTTP transport) initializes and tools/list returns
//     exactly the expected tool names ([MCPTools], [CompareTools]);
//     skipped without a key.
//   - supervisor: every supervised program is RUNNING; skipped when no
//     supervisor runs ([Supervisor]), failed with its error when `hbx
//     supervise --hold-on-error` holds on a start-up error instead
//     (internal/supervisorclient's adapter reads supervisor.CheckHeld).
//   - release: the active release is the configured one (ReleaseWant's
//     release.Target, compared by release.Target.Check); with Deep, its
//     manifest and config re-hash to the recorded digests ([Release]).
//     It fails first with ReleaseWant.Change's error: a release change
//     or restore half done is never healthy.
//   - listeners: every listening TCP socket of the executor's process tree
//     is on loopback, and the configured address and port is among them
//     ([Listeners]); the executor's pid comes from the supervisor, else
//     from the pidfile of `hbx run executor`. Exposed to the network
//     (Options.Network, executor.exposure network), it listens on the
//     configured address and port and, besides it, on loopback only
//     ([ListenersExact]): in both exposures the loopback side ports of
//     the executor's own tree (a tool bridge, workerd children) are part
//     of the payload; processes outside the tree are never looked at.
//     Open files it may not read (root without CAP_SYS_PTRACE, a
//     container's default, probing another user's Executor) fail it with
//     [ErrProcUnreadable], naming the pid and the capability, never as
//     "listens on nothing".
//   - data-dir: the data directory exists, is owned by the expected user,
//     has mode 0700 or stricter and is not a mount point ([DataDir]).
//
// api-health and web-ui send the bearer key when one is configured, so a
// payload that answers 401 on every path without its key (the Executor
// CLI edition, `executor web --auth-token KEY`) is judged by its answers
// with it; mcp-auth never sends it. A key file they cannot read (missing,
// mode too open) is not their failure: they send no key, and name the
// key file's problem when they fail; mcp-tools fails on it.
//
// # Readiness
//
// [Ready] returns the probe that says a started payload is ready and,
// while it runs, still alive: the code of one check, named by
// health.readiness ([Readiness]): api-health (the default; it fits the
// pinned self-host image, whose /api/health needs no key, and, with the
// key configured, the CLI edition), mcp-auth (the 401 Bearer challenge,
// for a payload without /api/health) or mcp-tools (an MCP session with
// the key). The supervisor's readiness gate and wedge detection run it,
// then [Listeners] (check listeners); the waits of backup, restore and
// upgrade run it too. Exposed to the network (Options.Network), every
// readiness probe also runs mcp-auth: an Executor whose /mcp answers
// without a key is never ready, and a running one that starts to is
// wedged.
//
// # What it guarantees
//
//   - No check outlives its timeout (Options.Timeout, default 5s) by more
//     than a second: network requests carry the deadline, and a check that
//     still has not returned is reported failed and abandoned.
//   - HTTP requests go straight to the configured address (loopback for
//     0.0.0.0 and ::, where Executor listens too): never
//     through a proxy, never over a reused connection (a restarted server
//     is not mistaken for a dead one through a stale keep-alive
//     connection), never following a redirect.
//   - The MCP key is sent only in the Authorization header of requests
//     to Executor's configured loopback address (never by mcp-auth). It
//     is held in a [Key], which fmt, slog and encoding/json
//     render as "[redacted]"; no reason, error or log record carries it.
//     A key file must be mode 0600 or stricter, its first line one key
//     (names.BearerKey: ASCII token characters only).
//   - Checks only read: nothing on disk, in the supervisor or in Executor
//     is changed (the MCP session is closed again).
//
// # What it does not guarantee
//
//   - It does not judge Executor beyond the surface above: a status "ok"
//     from /api/health is taken at its word.
//   - The listeners check sees only sockets the process tree holds at the
//     moment it looks, and reading another user's /proc/<pid>/fd needs
//     root or that user. A double-forked process (reparented away from the
//     tree) is still seen while it stays in the program's process group;
//     one that also left the group (setsid) is not.
//   - A pid taken from a pidfile is trusted only if that process holds
//     the data directory's lock, which `hbx run executor` hands its
//     payload: a stale pidfile's reused pid, or a pid the payload wrote
//     to name another process, is refused. The pidfile
//     lives in the payload's state directory, so the payload can name any
//     pid; it is read as a small regular file only (no FIFO, no device,
//     never through a symbolic link, at most 64 bytes) and its content is
//     never quoted.
//   - Deep release checks do not re-hash the rootfs (`hbx install
//     --verify` does that).
//   - It prints nothing: Report.Text returns the lines hbx health prints,
//     and Report.Err the one-line failure naming the failed checks.
package health
