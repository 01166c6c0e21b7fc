// Package health checks that the box works: the acceptance checks of
// `hbx health`, run by [Run] (once) or [Wait] (until they pass), each
// reported as pass, fail or skip with a one-line reason and its duration.
//
// The checks, in order (names as in reports and --only):
//
//   - api-health: GET /api/health answers 200 with a JSON object that has
//     a "status" field ([APIHealth]).
//   - web-ui: GET / answers 200 with an HTML page ([WebUI]).
//   - mcp-auth: an MCP initialize request without credentials answers 401
//     with a WWW-Authenticate header offering the Bearer scheme
//     ([MCPAuth]).
//   - mcp-tools: with the bearer key, an MCP session (the official Go SDK,
//     streamable HTTP transport) initializes and tools/list returns
//     exactly the expected tool names ([MCPTools], [CompareTools]);
//     skipped without a key.
//   - supervisor: every supervised program is RUNNING; skipped when no
//     supervisor runs ([Supervisor]).
//   - release: the active release is the configured one; with Deep, its
//     manifest and config re-hash to the recorded digests ([Release]).
//     It fails first with ReleaseWant.Change's error: a release change
//     or restore half done is never healthy.
//   - listeners: every listening TCP socket of the executor's process tree
//     is on loopback, and the configured address and port is among them
//     ([Listeners]); the executor's pid comes from the supervisor, else
//     from the pidfile of `hbx run executor`.
//   - data-dir: the data directory exists, is owned by the expected user
//     and has mode 0700 or stricter ([DataDir]).
//
// The supervisor's readiness gate and wedge detection call [APIHealth]
// and [Listeners]: the same code as checks api-health and listeners.
//
// # What it guarantees
//
//   - No check outlives its timeout (Options.Timeout, default 5s) by more
//     than a second: network requests carry the deadline, and a check that
//     still has not returned is reported failed and abandoned.
//   - HTTP requests go straight to the configured loopback address: never
//     through a proxy, never over a reused connection (a restarted server
//     is not mistaken for a dead one through a stale keep-alive
//     connection), never following a redirect.
//   - The MCP key is sent only in the Authorization header of the MCP
//     requests. It is held in a [Key], which fmt, slog and encoding/json
//     render as "[redacted]"; no reason, error or log record carries it.
//     A key file must be mode 0600 or stricter.
//   - Checks only read: nothing on disk, in the supervisor or in Executor
//     is changed (the MCP session is closed again).
//
// # What it does not do
//
//   - It does not judge Executor beyond the surface above: a 200 from
//     /api/health whose status says "degraded" passes (the reason shows
//     it).
//   - The listeners check sees only sockets the process tree holds at the
//     moment it looks, and reading another user's /proc/<pid>/fd needs
//     root or that user; a listener opened by a process that left the tree
//     (double fork to init) is not seen.
//   - A pid taken from a pidfile is trusted if such a process exists; a
//     stale pidfile whose pid was reused names the wrong tree.
//   - Deep release checks do not re-hash the rootfs (`hbx install
//     --verify` does that).
package health
