// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Check is one line of a doctor's report.
type Check struct {
	Name   string
	OK     bool
	Detail string // what was seen
	Remedy string // what to do when not OK
}

// Report is a doctor's result, in the order the checks ran.
type Report struct{ Checks []Check }

// OK reports whether every check passed (an empty report is not OK).
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

// FirstFailure is the first failing check as "name: detail", or "".
func (r Report) FirstFailure() string {
	for _, c := range r.Checks {
		if !c.OK {
			return c.Name + ": " + c.Detail
		}
	}
	return ""
}

// DefaultBootWindow is how long Doctor's host probe retries a port that
// does not answer yet (a box just started).
const DefaultBootWindow = 30 * time.Second

// Doctor checks b from the host: both containers running, the published
// port answering /api/health with status ok (retried for window while it
// does not: a box just started), /mcp refusing no key and accepting
// mcp.key, then `hbx health` inside the executor. Checks after a failed
// container check are not run.
func (d Docker) Doctor(ctx context.Context, b Box, window time.Duration) Report {
	if window <= 0 {
		window = DefaultBootWindow
	}
	var r Report
	c := d.checkContainers(ctx, b)
	r.Checks = append(r.Checks, c)
	if !c.OK {
		return r
	}
	r.Checks = append(r.Checks, probeHealth(ctx, b, window), probeKey(ctx, b))
	r.Checks = append(r.Checks, d.inBoxHealth(ctx, b))
	return r
}

// checkContainers wants the executor and the agent running.
func (d Docker) checkContainers(ctx context.Context, b Box) Check {
	c := Check{Name: "containers"}
	svcs, err := d.Services(ctx, b)
	if err != nil {
		c.Detail, c.Remedy = err.Error(), "is the Docker Engine up? (docker info)"
		return c
	}
	var bad []string
	for _, name := range []string{"executor", "agent"} {
		s, ok := svcs[name]
		switch {
		case !ok:
			bad = append(bad, name+" has no container")
		case s.State != "running":
			bad = append(bad, fmt.Sprintf("%s is %s (%s)", name, s.State, s.Status))
		}
	}
	if len(bad) > 0 {
		c.Detail = strings.Join(bad, "; ")
		c.Remedy = fmt.Sprintf("hbx box start %s; hbx box logs %s executor says why it stopped", b.Name, b.Name)
		return c
	}
	c.OK, c.Detail = true, "executor and agent running"
	return c
}

// probeHealth GETs /api/health on the published port until it answers or
// window passes.
func probeHealth(ctx context.Context, b Box, window time.Duration) Check {
	c := Check{Name: "host port"}
	u := b.URL() + "api/health"
	deadline := time.Now().Add(window)
	for {
		code, body, err := hostRequest(ctx, http.MethodGet, u, "", "")
		switch {
		case err == nil && code == 200 && strings.Contains(body, `"ok"`):
			c.OK, c.Detail = true, "GET "+u+": 200 ok"
			return c
		case err == nil:
			c.Detail = fmt.Sprintf("GET %s: %d %s", u, code, strings.TrimSpace(body))
		default:
			c.Detail = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.Remedy = fmt.Sprintf("the executor does not answer on the box's port: hbx box logs %s executor; is another program on port %d?", b.Name, b.Port())
			return c
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// initialize is an MCP initialize request.
const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"hbx-box","version":"1"}}}`

// probeKey wants /mcp to answer 401 without a key and 200 with mcp.key.
func probeKey(ctx context.Context, b Box) Check {
	c := Check{Name: "key gate", Remedy: fmt.Sprintf("the executor does not take the box's key (%s): hbx box rotate-token %s, or for a key minted in Executor's web UI, write it into that file", b.Path(KeyFile), b.Name)}
	key, err := ReadKey(b)
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	u := b.URL() + "mcp"
	without, _, err := hostRequest(ctx, http.MethodPost, u, "", initialize)
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	with, _, err := hostRequest(ctx, http.MethodPost, u, key, initialize)
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	c.Detail = fmt.Sprintf("POST %s: %d without the key, %d with it", u, without, with)
	c.OK = without == http.StatusUnauthorized && with == http.StatusOK
	return c
}

// hostRequest sends one request with a 10 s limit and returns the status
// and up to 4 KiB of the body.
func hostRequest(ctx context.Context, method, url, key, body string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, string(data), nil
}

// inBoxHealth runs `hbx health` in the executor.
func (d Docker) inBoxHealth(ctx context.Context, b Box) Check {
	c := Check{Name: "hbx health"}
	out, err := d.Compose(ctx, b, "exec", "-T", "executor", "hbx", "health")
	if err != nil {
		c.Detail = strings.TrimSpace(out + " " + err.Error())
		c.Remedy = fmt.Sprintf("the failing check names the cause; hbx box logs %s executor", b.Name)
		return c
	}
	c.OK, c.Detail = true, "every check passed in the executor"
	return c
}
