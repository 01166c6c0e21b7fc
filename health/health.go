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
// returns nil when it answers 200 with a JSON object that has a "status"
// field, before ctx ends. Otherwise the error wraps ErrUnhealthy and says
// what happened: the transport error, the HTTP status (with the body's
// status when there is one), or what is wrong with the body. It is check
// api-health and the supervisor's readiness and wedge probe.
func APIHealth(ctx context.Context, url string) error {
	_, err := apiHealth(ctx, url)
	return err
}

// apiHealth is APIHealth; it also returns the body's status field.
func apiHealth(ctx context.Context, url string) (string, error) {
	resp, body, err := get(ctx, url)
	if err != nil {
		return "", err
	}
	var doc struct {
		Status json.RawMessage `json:"status"`
	}
	jsonErr := json.Unmarshal(body, &doc)
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
	return string(doc.Status), nil
}

// get sends GET url and returns the response with up to maxBody bytes of
// its body (the body is closed). Errors wrap ErrUnhealthy.
func get(ctx context.Context, url string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnhealthy, err)
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

// snippet quotes the start of b for an error message.
func snippet(b []byte) string {
	const n = 80
	if len(b) > n {
		return fmt.Sprintf("%q...", b[:n])
	}
	return fmt.Sprintf("%q", b)
}
