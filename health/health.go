package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// ErrUnhealthy is wrapped by every failed check: no answer, or an answer
// other than 200.
var ErrUnhealthy = errors.New("unhealthy")

// client talks to loopback services directly: no proxy, no keep-alive.
var client = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// APIHealth sends GET url (e.g. "http://127.0.0.1:4788/api/health") and
// returns nil when it answers 200 before ctx ends, else an error wrapping
// ErrUnhealthy that says what happened.
func APIHealth(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnhealthy, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnhealthy, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: GET %s: %s", ErrUnhealthy, url, resp.Status)
	}
	return nil
}
