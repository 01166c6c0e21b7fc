package health

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermesbox/hbx/internal/buildinfo"
)

// mcpProtocolVersion is the protocol version MCPTools asks for: the newest
// one with the initialize handshake, which Executor's MCP server speaks.
// (Newer SDKs first try a stateless server/discover request; asking for
// this version skips that probe.)
const mcpProtocolVersion = "2025-11-25"

// MCPTools opens an MCP client session with key at url (Executor's
// "/mcp") over the streamable HTTP transport of the official Go SDK,
// lists the server's tools (every page) and returns their names in the
// server's order. It returns an error wrapping ErrUnhealthy when the
// session cannot be initialized or the list cannot be read; a key the
// server refuses is reported as such. The key goes only into the
// Authorization header of the requests; no error or log carries it.
func MCPTools(ctx context.Context, url string, key Key) ([]string, error) {
	rt := &bearerTransport{key: key, next: transport}
	t := &mcp.StreamableClientTransport{
		Endpoint:             url,
		HTTPClient:           &http.Client{Transport: rt, CheckRedirect: client.CheckRedirect},
		MaxRetries:           -1,   // a check answers for one attempt
		DisableStandaloneSSE: true, // requests and their answers only
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "hbx-health", Version: buildinfo.Version}, nil)
	cs, err := c.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: mcpProtocolVersion})
	if err != nil {
		return nil, rt.explain("initialize", url, err)
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, rt.explain("tools/list", url, err)
		}
		names = append(names, tool.Name)
	}
	return names, nil
}

// CompareTools returns "" when got holds exactly the names of want (in any
// order, each once), else what differs: the missing names, the unexpected
// ones and the repeated ones, quoted.
func CompareTools(got, want []string) string {
	var missing, extra, twice []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, strconv.Quote(w))
		}
	}
	for i, g := range got {
		switch {
		case slices.Contains(got[:i], g):
			if !slices.Contains(twice, strconv.Quote(g)) {
				twice = append(twice, strconv.Quote(g))
			}
		case !slices.Contains(want, g):
			extra = append(extra, strconv.Quote(g))
		}
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "missing "+strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		parts = append(parts, "unexpected "+strings.Join(extra, ", "))
	}
	if len(twice) > 0 {
		parts = append(parts, "listed twice "+strings.Join(twice, ", "))
	}
	return strings.Join(parts, "; ")
}

// ToolsError is check mcp-tools' failure when tools/list answered with a
// set other than the expected one: Listed is what the server listed, in
// its order, Want the expected set, Diff CompareTools' account of the
// difference.
type ToolsError struct {
	URL          string
	Diff         string
	Listed, Want []string
}

func (e *ToolsError) Error() string {
	return fmt.Sprintf("tools/list at %s: %s (the server lists %s; want %s)", e.URL, e.Diff, quoteList(e.Listed), quoteList(e.Want))
}

// ListedTools returns the tools a server listed when err (or one it
// wraps) is a *ToolsError whose list names no tool twice: a set an
// operator could pin instead (hbx upgrade --mcp-tools).
func ListedTools(err error) ([]string, bool) {
	var te *ToolsError
	if !errors.As(err, &te) || len(te.Listed) == 0 {
		return nil, false
	}
	for i, n := range te.Listed {
		if slices.Contains(te.Listed[:i], n) {
			return nil, false
		}
	}
	return te.Listed, true
}

// bearerTransport adds the key to every request and remembers the last
// refusal (401 or 403), so an error of the SDK can be explained.
type bearerTransport struct {
	key     Key
	next    http.RoundTripper
	refused atomic.Value // string: the status of the last 401 or 403
}

// RoundTrip sends a copy of req with the Authorization header set.
func (b *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+b.key.v)
	resp, err := b.next.RoundTrip(r)
	if err == nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
		b.refused.Store(resp.Status)
	}
	return resp, err
}

// explain wraps the SDK's err for step into an error wrapping
// ErrUnhealthy: a refused key is said in plain words.
func (b *bearerTransport) explain(step, url string, err error) error {
	if s, ok := b.refused.Load().(string); ok {
		return fmt.Errorf("%w: MCP %s at %s: the server refused the key (%s)", ErrUnhealthy, step, url, s)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: MCP %s at %s: no answer in time: %w", ErrUnhealthy, step, url, err)
	}
	return fmt.Errorf("%w: MCP %s at %s: %w", ErrUnhealthy, step, url, err)
}
