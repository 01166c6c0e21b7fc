package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// ErrUnhealthy is wrapped by the error of every failed probe: no answer,
// an answer other than the one wanted, a listener off loopback.
var ErrUnhealthy = errors.New("unhealthy")

// ErrNotOffered is wrapped (with ErrUnhealthy) by the error of
// APIHealth and APIHealthKey when GET /api/health answers 404 or 405: the
// payload does not offer the endpoint (the Executor CLI edition has none),
// which is no verdict on its health. Readiness then falls back to the MCP
// checks ([Ready]) and check api-health is skipped.
var ErrNotOffered = errors.New("not offered by this payload")

// maxBody is how much of a response body a check reads.
const maxBody = 256 << 10

// transport talks to loopback services directly: no proxy, no keep-alive,
// so a restarted server is never mistaken for a dead one (or the reverse)
// through a stale connection.
var transport = &http.Transport{Proxy: nil, DisableKeepAlives: true}

// client uses transport and never follows redirects: a check judges the
// answer of the URL it asked.
var client = &http.Client{
	Transport:     transport,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// APIHealth sends GET url (e.g. "http://127.0.0.1:4788/api/health") and
// returns nil when it answers 200 with a JSON object whose "status" field
// is the string "ok", before ctx ends. Otherwise the error wraps
// ErrUnhealthy and says what happened: the transport error, the HTTP
// status (with the body's status when there is one), what is wrong with
// the body, or the status other than "ok" (Executor answers 200 with
// {"status":"degraded"} when its database fails); a 404 or 405 also wraps
// ErrNotOffered. It is check api-health
// without a key; see [APIHealthKey].
func APIHealth(ctx context.Context, url string) error {
	_, err := apiHealth(ctx, url, Key{})
	return err
}

// APIHealthKey is APIHealth sending key, unless zero, as a bearer key in
// the Authorization header: a payload that answers 401 on every path
// without its key (the Executor CLI edition, `executor web --auth-token
// KEY`) is judged by its answer with the key. It is check api-health and
// the supervisor's default readiness and wedge probe.
func APIHealthKey(ctx context.Context, url string, key Key) error {
	_, err := apiHealth(ctx, url, key)
	return err
}

// healthOK is the only status of /api/health that passes.
const healthOK = "ok"

// apiHealth is APIHealthKey; it also returns the body's status field as
// JSON text.
func apiHealth(ctx context.Context, url string, key Key) (string, error) {
	resp, body, err := get(ctx, url, key)
	if err != nil {
		return "", err
	}
	var doc struct {
		Status json.RawMessage `json:"status"`
	}
	jsonErr := json.Unmarshal(body, &doc)
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		return "", fmt.Errorf("%w: GET %s: %s: %w", ErrUnhealthy, url, resp.Status, ErrNotOffered)
	}
	if resp.StatusCode != http.StatusOK {
		if jsonErr == nil && doc.Status != nil {
			return "", fmt.Errorf("%w: GET %s: %s, status %s", ErrUnhealthy, url, resp.Status, doc.Status)
		}
		return "", fmt.Errorf("%w: GET %s: %s", ErrUnhealthy, url, resp.Status)
	}
	switch {
	case jsonErr != nil:
		return "", fmt.Errorf("%w: GET %s: 200 but the body is not a JSON object: %s", ErrUnhealthy, url, snippet(body))
	case doc.Status == nil:
		return "", fmt.Errorf("%w: GET %s: 200 but the body has no status field: %s", ErrUnhealthy, url, snippet(body))
	}
	var status string
	if err := json.Unmarshal(doc.Status, &status); err != nil || status != healthOK {
		return "", fmt.Errorf("%w: GET %s: 200 but status %s, want %q", ErrUnhealthy, url, rawSnippet(doc.Status), healthOK)
	}
	return string(doc.Status), nil
}

// get sends GET url, with key as a bearer key unless it is zero, and
// returns the response with up to maxBody bytes of its body (the body is
// closed). Errors wrap ErrUnhealthy.
func get(ctx context.Context, url string, key Key) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnhealthy, err)
	}
	if !key.IsZero() {
		req.Header.Set("Authorization", "Bearer "+key.v)
	}
	return do(req)
}

// do sends req with client and reads up to maxBody bytes of the answer.
// Errors wrap ErrUnhealthy.
func do(req *http.Request) (*http.Response, []byte, error) {
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // "Get \"http://...\": " said again below
		}
		return nil, nil, fmt.Errorf("%w: %s %s: %w", ErrUnhealthy, req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s %s: read body: %w", ErrUnhealthy, req.Method, req.URL, err)
	}
	return resp, body, nil
}

// rawSnippet is JSON text b, cut after 80 bytes.
func rawSnippet(b []byte) string {
	const n = 80
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// snippet quotes the start of b for an error message.
func snippet(b []byte) string {
	const n = 80
	if len(b) > n {
		return fmt.Sprintf("%q...", b[:n])
	}
	return fmt.Sprintf("%q", b)
}
