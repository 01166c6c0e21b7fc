// Package health checks that Executor answers. For now it holds the one
// check the supervisor needs, APIHealth: GET /api/health answers 200.
//
// It guarantees that a check never outlives its context, never goes
// through an HTTP proxy and never reuses a connection (a restarted server
// is not mistaken for a dead one through a stale keep-alive connection).
// It does not judge the body beyond the status code.
package health
