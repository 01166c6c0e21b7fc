package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAPIHealth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte(`{"status":"ok"}`))
		case "/slow":
			time.Sleep(time.Second)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + l.Addr().String() + "/api/health"
	l.Close()
	tests := []struct {
		url     string
		wantErr string // "" for healthy
	}{
		{srv.URL + "/ok", ""},
		{srv.URL + "/bad", "503 Service Unavailable"},
		{srv.URL + "/slow", "context deadline exceeded"},
		{closed, "connection refused"},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := APIHealth(ctx, tt.url)
		cancel()
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("APIHealth(%s) = %v, want nil", tt.url, err)
			}
			continue
		}
		if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("APIHealth(%s) = %v, want ErrUnhealthy containing %q", tt.url, err, tt.wantErr)
		}
	}
}
