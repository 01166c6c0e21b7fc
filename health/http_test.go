package health

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWebUI(t *testing.T) {
	page := func(ct, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if ct != "" {
				w.Header().Set("Content-Type", ct)
			}
			io.WriteString(w, body)
		}
	}
	tests := []struct {
		name    string
		h       http.HandlerFunc
		wantErr string // "" for a pass
	}{
		{"doctype", page("text/html; charset=utf-8", "<!doctype html>\n<html><title>x</title></html>"), ""},
		{"upper case, comment first", page("text/html", "\n<!-- built -->\n<!DOCTYPE HTML><html></html>"), ""},
		{"bare html tag", page("text/html", "<html lang=en></html>"), ""},
		{"bom", page("text/html", "\xef\xbb\xbf<!doctype html><html></html>"), ""},
		{"json", page("application/json", `{"a":1}`), `Content-Type "application/json", want text/html`},
		{"html type, text body", page("text/html", "hello"), "the body is not an HTML document"},
		{"unclosed comment", page("text/html", "<!-- x"), "the body is not an HTML document"},
		{"not found", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, "404 Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.h)
			defer srv.Close()
			err := WebUI(context.Background(), srv.URL+"/")
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("WebUI() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("WebUI() = %v, want ErrUnhealthy containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestMCPAuth(t *testing.T) {
	challenge := func(status int, values ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.Header.Get("Authorization") != "" || !strings.Contains(readAll(r.Body), `"method":"initialize"`) {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			for _, v := range values {
				w.Header().Add("WWW-Authenticate", v)
			}
			w.WriteHeader(status)
		}
	}
	tests := []struct {
		name    string
		h       http.HandlerFunc
		wantErr string
	}{
		{"executor", challenge(401, `Bearer realm="executor", resource_metadata="http://localhost:4788/.well-known/oauth-protected-resource/mcp"`), ""},
		{"second header", challenge(401, `Basic realm="x"`, `bearer`), ""},
		{"second challenge", challenge(401, `Basic realm="a, Bearer b", Bearer error="invalid_token"`), ""},
		{"open endpoint", challenge(200), "200 OK, want 401 Unauthorized"},
		{"forbidden", challenge(403, "Bearer"), "403 Forbidden, want 401 Unauthorized"},
		{"no header", challenge(401), "401 without a WWW-Authenticate header"},
		{"basic only", challenge(401, `Basic realm="Bearer"`), `has no Bearer challenge`},
		{"bearer as a parameter", challenge(401, `Basic realm="x", Bearer = "y"`), `has no Bearer challenge`},
		{"any key let through", func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
				w.Header().Set("WWW-Authenticate", "Bearer")
				w.WriteHeader(http.StatusUnauthorized)
			}
		}, "with a made-up key: 200 OK, want a refusal (the bearer gate takes any key)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.h)
			defer srv.Close()
			err := MCPAuth(context.Background(), srv.URL+"/mcp")
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("MCPAuth() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("MCPAuth() = %v, want ErrUnhealthy containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestChallengeSchemes(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{`Bearer`, []string{"Bearer"}},
		{`Bearer realm="executor", resource_metadata="http://x/y"`, []string{"Bearer"}},
		{`Basic realm="a,b", Bearer`, []string{"Basic", "Bearer"}},
		{`Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple"`, []string{"Newauth", "Basic"}},
		{`Negotiate abc123==, Bearer error="invalid_token"`, []string{"Negotiate", "Bearer"}},
		{`Basic realm = "x"`, []string{"Basic"}},
		{``, nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(challengeSchemes(tt.in), tt.want); diff != "" {
			t.Errorf("challengeSchemes(%q) (-got +want):\n%s", tt.in, diff)
		}
	}
}

func TestHTTPChecksHonourTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	for name, f := range map[string]func(context.Context, string) error{"APIHealth": APIHealth, "WebUI": WebUI, "MCPAuth": MCPAuth} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		err := f(ctx, srv.URL)
		cancel()
		if took := time.Since(start); err == nil || took > 2*time.Second {
			t.Errorf("%s(wedged server) = %v after %s, want an error after about 100ms", name, err, took)
		}
	}
}

func readAll(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}
