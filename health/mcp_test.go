package health

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpServer serves a real MCP server (the Go SDK's own) with the named
// tools behind a bearer check of key, on 127.0.0.1. Tools are listed one
// per page, so clients must follow cursors.
func mcpServer(t *testing.T, key string, tools ...string) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ServerOptions{PageSize: 1})
	for _, name := range tools {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.Header().Set("WWW-Authenticate", `Bearer realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

func TestMCPTools(t *testing.T) {
	const key = "k3y-0f-the-test"
	u := mcpServer(t, key, "execute", "resume", "debug")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got, err := MCPTools(ctx, u, NewKey(key+"\n"))
	if err != nil {
		t.Fatalf("MCPTools(right key) = %v", err)
	}
	if diff := cmp.Diff(got, []string{"debug", "execute", "resume"}); diff != "" {
		t.Errorf("MCPTools() (-got +want):\n%s", diff)
	}

	_, err = MCPTools(ctx, u, NewKey("wrong-key"))
	if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "the server refused the key (401 Unauthorized)") {
		t.Errorf("MCPTools(wrong key) = %v, want ErrUnhealthy: refused", err)
	}
	if err != nil && (strings.Contains(err.Error(), "wrong-key") || strings.Contains(err.Error(), key)) {
		t.Errorf("MCPTools(wrong key) = %v: the error carries a key", err)
	}

	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	if _, err := MCPTools(ctx, srv.URL+"/mcp", NewKey(key)); !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "MCP initialize") {
		t.Errorf("MCPTools(not an MCP server) = %v, want ErrUnhealthy: MCP initialize ...", err)
	}
}

func TestCompareTools(t *testing.T) {
	want := []string{"execute", "resume"}
	tests := []struct {
		got  []string
		want string
	}{
		{[]string{"execute", "resume"}, ""},
		{[]string{"resume", "execute"}, ""},
		{[]string{"execute"}, `missing "resume"`},
		{[]string{"execute", "resume", "debug"}, `unexpected "debug"`},
		{nil, `missing "execute", "resume"`},
		{[]string{"execute", "execute", "shell"}, `missing "resume"; unexpected "shell"; listed twice "execute"`},
	}
	for _, tt := range tests {
		if got := CompareTools(tt.got, want); got != tt.want {
			t.Errorf("CompareTools(%q, %q) = %q, want %q", tt.got, want, got, tt.want)
		}
	}
}

// TestToolsMismatchCause: check mcp-tools against a real MCP server that
// lists another set fails with a *ToolsError as the Result's Cause, whose
// listed set ListedTools gives (a set to pin instead); a set listing a
// name twice, another error and a pass give none.
func TestToolsMismatchCause(t *testing.T) {
	const key = "k3y-0f-the-test"
	u, err := url.Parse(mcpServer(t, key, "execute", "skills", "resume"))
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	run := func(want ...string) Result {
		t.Helper()
		opts := Options{Listen: "127.0.0.1", Port: port, Key: NewKey(key), Tools: want, Timeout: 10 * time.Second}
		rep, err := Run(context.Background(), opts, []string{CheckMCPTools})
		if err != nil || len(rep.Checks) != 1 {
			t.Fatalf("Run(mcp-tools) = %v, %v", rep, err)
		}
		return rep.Checks[0]
	}
	r := run("execute", "resume")
	listed, ok := ListedTools(r.Cause())
	if r.Status != Fail || !ok || strings.Join(listed, ",") != "execute,resume,skills" {
		t.Errorf("mcp-tools expecting execute,resume = %s %q, ListedTools(Cause) = %v, %v; want fail listing execute,resume,skills", r.Status, r.Reason, listed, ok)
	}
	if !strings.Contains(r.Reason, `unexpected "skills"`) {
		t.Errorf("reason %q does not name the extra tool", r.Reason)
	}
	if r := run("execute", "resume", "skills"); r.Status != Pass || r.Cause() != nil {
		t.Errorf("mcp-tools expecting the listed set = %s %q, cause %v; want pass, no cause", r.Status, r.Reason, r.Cause())
	}
	for _, err := range []error{
		&ToolsError{Listed: []string{"execute", "execute"}, Want: []string{"execute"}},
		errors.New("tools/list: connection refused"),
		nil,
	} {
		if got, ok := ListedTools(fmt.Errorf("gate: %w", err)); ok {
			t.Errorf("ListedTools(%v) = %v, true; want none", err, got)
		}
	}
}
