package health

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// WebUI sends GET url (Executor's "/", the setup UI) and returns nil when
// it answers 200 with Content-Type text/html and a body that starts like
// an HTML document (a doctype or an <html> tag, after white space and
// comments). Otherwise the error wraps ErrUnhealthy. It is check web-ui
// without a key.
func WebUI(ctx context.Context, url string) error {
	return webUI(ctx, url, Key{})
}

// webUI is WebUI sending key, unless zero, as a bearer key.
func webUI(ctx context.Context, url string, key Key) error {
	resp, body, err := get(ctx, url, key)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: GET %s: %s", ErrUnhealthy, url, resp.Status)
	}
	ct := resp.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "text/html" {
		return fmt.Errorf("%w: GET %s: Content-Type %q, want text/html", ErrUnhealthy, url, ct)
	}
	if !looksLikeHTML(body) {
		return fmt.Errorf("%w: GET %s: the body is not an HTML document: %s", ErrUnhealthy, url, snippet(body))
	}
	return nil
}

// looksLikeHTML reports whether b starts, after white space, a BOM and
// comments, with <!doctype html or <html.
func looksLikeHTML(b []byte) bool {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	for {
		b = bytes.TrimLeft(b, " \t\r\n\f")
		rest, ok := bytes.CutPrefix(b, []byte("<!--"))
		if !ok {
			break
		}
		_, after, ok := bytes.Cut(rest, []byte("-->"))
		if !ok {
			return false
		}
		b = after
	}
	low := bytes.ToLower(b[:min(len(b), 16)])
	return bytes.HasPrefix(low, []byte("<!doctype html")) || bytes.HasPrefix(low, []byte("<html"))
}

// initializeBody is the JSON-RPC initialize request MCPAuth sends.
const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hbx-health","version":"1"}}}`

// MCPAuth sends an MCP initialize request to url (Executor's "/mcp")
// without credentials and returns nil when the server refuses it with 401
// and a WWW-Authenticate header offering the Bearer scheme (RFC 6750), and
// refuses (a 4xx or 5xx) the same request with a made-up Bearer key.
// Anything else, a 200 above all, is an error wrapping ErrUnhealthy. It is
// check mcp-auth.
func MCPAuth(ctx context.Context, url string) error {
	_, err := mcpAuth(ctx, url)
	return err
}

// mcpAuth is MCPAuth; it also returns the Bearer challenge.
func mcpAuth(ctx context.Context, url string) (string, error) {
	resp, err := postInitialize(ctx, url, "")
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusUnauthorized {
		return "", fmt.Errorf("%w: POST %s without a key: %s, want 401 Unauthorized", ErrUnhealthy, url, resp.Status)
	}
	values := resp.Header.Values("WWW-Authenticate")
	challenge := ""
	for _, v := range values {
		if hasScheme(v, "Bearer") {
			challenge = v
			break
		}
	}
	if challenge == "" && len(values) == 0 {
		return "", fmt.Errorf("%w: POST %s without a key: 401 without a WWW-Authenticate header", ErrUnhealthy, url)
	}
	if challenge == "" {
		return "", fmt.Errorf("%w: POST %s without a key: WWW-Authenticate %q has no Bearer challenge", ErrUnhealthy, url, strings.Join(values, ", "))
	}
	// A gate that lets any Bearer value through is as open as none.
	resp, err = postInitialize(ctx, url, wrongKey())
	if err != nil {
		return "", err
	}
	if resp.StatusCode < 400 {
		return "", fmt.Errorf("%w: POST %s with a made-up key: %s, want a refusal (the bearer gate takes any key)", ErrUnhealthy, url, resp.Status)
	}
	return challenge, nil
}

// postInitialize POSTs initializeBody to url, with "Authorization: Bearer
// key" unless key is "".
func postInitialize(ctx context.Context, url, key string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(initializeBody))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnhealthy, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, _, err := do(req)
	return resp, err
}

// wrongKey returns a fresh random key (256 bits, hex), no box's key.
func wrongKey() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// hasScheme reports whether the WWW-Authenticate value v (RFC 9110
// 11.6.1: challenges separated by commas, each an auth-scheme followed by
// a token68 or by auth-params, whose values may be quoted strings holding
// commas) holds a challenge whose scheme is scheme, ignoring case.
func hasScheme(v, scheme string) bool {
	for _, c := range challengeSchemes(v) {
		if strings.EqualFold(c, scheme) {
			return true
		}
	}
	return false
}

// challengeSchemes returns the auth-schemes of the challenges in v. An
// element is a new challenge when it starts with a token that is not
// followed by "=" (that would make it an auth-param of the previous one).
func challengeSchemes(v string) []string {
	var out []string
	for _, elem := range splitOutsideQuotes(v) {
		elem = strings.TrimSpace(elem)
		if elem == "" {
			continue
		}
		end := strings.IndexFunc(elem, func(r rune) bool { return r == ' ' || r == '\t' || r == '=' })
		if end < 0 {
			out = append(out, elem) // a scheme alone
			continue
		}
		if strings.HasPrefix(strings.TrimLeft(elem[end:], " \t"), "=") {
			continue // an auth-param, maybe with white space around "="
		}
		out = append(out, elem[:end])
	}
	return out
}

// splitOutsideQuotes splits v at commas that are not inside a quoted
// string (with backslash escapes).
func splitOutsideQuotes(v string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			out = append(out, v[start:i])
			start = i + 1
		}
	}
	return append(out, v[start:])
}
