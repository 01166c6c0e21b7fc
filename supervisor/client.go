package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Client talks to a running supervisor over its socket.
type Client struct {
	socket string
	http   *http.Client
	// Classes are the classes of Check errors the supervisor sends
	// (its Options.ErrorClasses): a refusal read with one of their codes
	// matches that class's Err (errors.Is), as the local error would.
	// nil: a refusal matches ErrRefused alone.
	Classes []ErrorClass
}

// ErrUntrustedPeer is wrapped by the error of Dial and of every request
// when the process serving the control socket is not root's (nor, when
// hbx does not run as root, this user's): another user could serve a fake
// supervisor there and lie about what runs or stopped (issue 25 item 2).
var ErrUntrustedPeer = errors.New("control socket served by an untrusted user")

// Dial checks that a supervisor answers on socket and returns a Client for
// it. With no supervisor there (no socket file, or nobody listening) the
// error wraps ErrNotRunning; a server whose SO_PEERCRED uid is neither
// root nor this process's effective uid is ErrUntrustedPeer, on every
// connection.
func Dial(ctx context.Context, socket string) (*Client, error) {
	c := &Client{socket: socket}
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	conn.Close()
	c.http = &http.Client{Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dial(ctx) },
		DisableKeepAlives: true,
	}}
	return c, nil
}

func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w (nothing listens on %s): start it with `hbx supervise`", ErrNotRunning, c.socket)
		}
		return nil, fmt.Errorf("connect to supervisor at %s: %w", c.socket, err)
	}
	if err := checkPeer(conn, c.socket); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// checkPeer refuses a connection whose server is not root's, nor this
// process's effective user's, by the credentials the kernel recorded when
// the server created its socket (SO_PEERCRED).
func checkPeer(conn net.Conn, socket string) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("connect to supervisor at %s: not a unix socket", socket)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("connect to supervisor at %s: %w", socket, err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return fmt.Errorf("connect to supervisor at %s: read peer credentials: %w", socket, errors.Join(err, credErr))
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s is served by pid %d of uid %d, not root: no answer from it is believed", ErrUntrustedPeer, socket, cred.Pid, cred.Uid)
	}
	return nil
}

// Status returns every program's status in priority order.
func (c *Client) Status(ctx context.Context) ([]Status, error) {
	var out []Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &out)
	return out, err
}

// Info returns what the supervisor says about itself; see Supervisor.Info.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var out Info
	err := c.do(ctx, http.MethodGet, "/v1/info", nil, &out)
	return out, err
}

// Start starts the named programs ("all" for every one) and waits for the
// outcome; see Supervisor.Start. A Result with a non-empty Error failed.
func (c *Client) Start(ctx context.Context, names ...string) ([]Result, error) {
	return c.names(ctx, "/v1/start", names)
}

// Stop stops the named programs and waits until they are STOPPED; see
// Supervisor.Stop.
func (c *Client) Stop(ctx context.Context, names ...string) ([]Result, error) {
	return c.names(ctx, "/v1/stop", names)
}

// Restart stops, then starts the named programs; a restart a program's
// Check refused is an error wrapping ErrRefused, and nothing was stopped.
func (c *Client) Restart(ctx context.Context, names ...string) ([]Result, error) {
	return c.names(ctx, "/v1/restart", names)
}

// Shutdown asks the supervisor to stop every program and exit, and waits
// until every program is stopped.
func (c *Client) Shutdown(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/shutdown", struct{}{}, nil)
}

// LogsRequest selects what Logs writes.
type LogsRequest struct {
	Name   string // program
	Stderr bool   // the stderr log instead of stdout
	File   bool   // the log the program writes itself (Program.OwnLog)
	Lines  int    // last lines to write first
	Follow bool   // then keep writing what is appended, until ctx ends
}

// Logs writes a program's log to w as LogsRequest says. With Follow it
// returns when ctx ends (nil) or the supervisor goes away.
func (c *Client) Logs(ctx context.Context, req LogsRequest, w io.Writer) error {
	q := url.Values{"name": {req.Name}, "n": {strconv.Itoa(req.Lines)}}
	if req.Stderr {
		q.Set("stream", "stderr")
	}
	if req.File {
		q.Set("stream", "file")
	}
	if req.Follow {
		q.Set("follow", "1")
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://hbx/v1/logs?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return c.transportError(err)
	}
	defer resp.Body.Close()
	if err := c.responseError(resp); err != nil {
		return err
	}
	_, err = io.Copy(w, resp.Body)
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}

// WaitRunning waits until every named program ("all": every one) is
// RUNNING at once and returns their statuses; see Supervisor.WaitRunning
// (ErrFatal, ErrUnknownProgram). It ends with ctx.
func (c *Client) WaitRunning(ctx context.Context, names ...string) ([]Status, error) {
	var out []Status
	if err := c.do(ctx, http.MethodPost, "/v1/wait", namesRequest{names}, &out); err != nil {
		return nil, fmt.Errorf("wait for %s to be RUNNING: %w", strings.Join(names, ", "), err)
	}
	return out, nil
}

// Hold is a held set of programs; see Client.Hold.
type Hold struct {
	// Results says how each program was stopped.
	Results []Result
	conn    net.Conn
	done    chan struct{}
	once    sync.Once
}

// Hold stops the named programs and keeps them stopped until Release or
// until this process's connection ends (when it dies, too); then the
// supervisor starts again those it stopped. It returns once they are all
// stopped. When ctx ends first, the error wraps context.Cause(ctx) (a
// signal's cause matches context.Canceled), not the closed connection.
func (c *Client) Hold(ctx context.Context, names ...string) (*Hold, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(namesRequest{names})
	req, _ := http.NewRequest(http.MethodPost, "http://hbx/v1/hold", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	// fail closes the connection; when ctx ended, that is what closed it
	// mid-request, and ctx's cause is the error, not the closed socket.
	fail := func(err error) error {
		stop()
		conn.Close()
		if ctx.Err() != nil {
			return fmt.Errorf("hold: talk to supervisor at %s: %w", c.socket, context.Cause(ctx))
		}
		return err
	}
	if err := req.Write(conn); err != nil {
		return nil, fail(fmt.Errorf("hold: %w", err))
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fail(fmt.Errorf("hold: %w", err))
	}
	if err := c.responseError(resp); err != nil {
		return nil, fail(err)
	}
	var rr resultsResponse
	if err := json.NewDecoder(resp.Body).Decode(&rr); err != nil {
		return nil, fail(fmt.Errorf("hold: read answer: %w", err))
	}
	stop()
	h := &Hold{Results: rr.Results, conn: conn, done: make(chan struct{})}
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body) // ends when the supervisor goes away or Release closes
		close(h.done)
	}()
	return h, nil
}

// Done is closed when the hold has ended: after Release, or when the
// supervisor went away.
func (h *Hold) Done() <-chan struct{} { return h.done }

// Restarts names the programs the hold stopped that its release starts
// again (those it found STARTING, RUNNING or BACKOFF; Result.Restart), in
// priority order.
func (h *Hold) Restarts() []string {
	var names []string
	for _, r := range h.Results {
		if r.Restart {
			names = append(names, r.Name)
		}
	}
	return names
}

// Release ends the hold; the supervisor starts the programs again. It does
// not wait for them to be RUNNING.
func (h *Hold) Release() error {
	var err error
	h.once.Do(func() { err = h.conn.Close() })
	return err
}

// names posts a namesRequest and decodes the results.
func (c *Client) names(ctx context.Context, path string, names []string) ([]Result, error) {
	var out resultsResponse
	err := c.do(ctx, http.MethodPost, path, namesRequest{names}, &out)
	return out.Results, err
}

// do sends one request and decodes a 200 answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://hbx"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(err)
	}
	defer resp.Body.Close()
	if err := c.responseError(resp); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("read supervisor answer: %w", err)
	}
	return nil
}

func (c *Client) transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, ErrNotRunning) {
		return err
	}
	return fmt.Errorf("talk to supervisor at %s: %w", c.socket, err)
}

// responseError turns a non-200 answer into an error: ErrUnknownProgram
// for code unknown_program, ErrFatal for fatal, ErrRefused for refused
// (and the Err of c.Classes its class names), ErrShuttingDown for
// shutting_down.
func (c *Client) responseError(resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var e apiError
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		return fmt.Errorf("supervisor answered %s", resp.Status)
	}
	switch e.Code {
	case codeUnknownProgram:
		return &remoteError{msg: e.Error, is: []error{ErrUnknownProgram}}
	case codeFatal:
		return &remoteError{msg: e.Error, is: []error{ErrFatal}}
	case codeRefused:
		is := []error{ErrRefused}
		if ce := classErr(c.Classes, e.Class); ce != nil {
			is = append(is, ce)
		}
		return &remoteError{msg: e.Error, is: is}
	case codeShuttingDown:
		return &remoteError{msg: e.Error, is: []error{ErrShuttingDown}}
	}
	return &remoteError{msg: e.Error}
}

// remoteError is an error the supervisor reported; Is matches the
// sentinels its code and class stand for.
type remoteError struct {
	msg string
	is  []error
}

func (e *remoteError) Error() string { return e.msg }

// Unwrap returns the sentinels the error's code and class stand for.
func (e *remoteError) Unwrap() []error { return e.is }
