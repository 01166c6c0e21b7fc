package health

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for a server process tree:
// with HBXTEST_LISTEN=addr,addr... it listens on each address, prints the
// bound addresses on one line, starts itself again as a child when
// HBXTEST_LISTEN_CHILD names the child's addresses (and prints the child's
// line too), then waits until its standard input closes.
func TestMain(m *testing.M) {
	if addrs := os.Getenv("HBXTEST_DAEMON_HOP"); addrs != "" {
		// The middle of a double fork: start the listener, leave it.
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "HBXTEST_DAEMON_HOP=", "HBXTEST_LISTEN="+addrs, "HBXTEST_LISTEN_CHILD=", "HBXTEST_LISTEN_DAEMON=")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if os.Getenv("HBXTEST_DAEMON_SETSID") != "" {
			// As Python's start_new_session: out of the process group too.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if addrs := os.Getenv("HBXTEST_LISTEN"); addrs != "" {
		os.Exit(listenChild(addrs, os.Getenv("HBXTEST_LISTEN_CHILD")))
	}
	os.Exit(m.Run())
}

func listenChild(addrs, childAddrs string) int {
	var bound []string
	for _, a := range strings.Split(addrs, ",") {
		l, err := net.Listen("tcp", a)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer l.Close()
		bound = append(bound, l.Addr().String())
	}
	fmt.Println(strings.Join(bound, ","))
	if childAddrs != "" {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "HBXTEST_LISTEN="+childAddrs, "HBXTEST_LISTEN_CHILD=")
		cmd.Stderr = os.Stderr
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { in.Close(); cmd.Wait() }()
		line, _ := bufio.NewReader(out).ReadString('\n')
		fmt.Print(line)
	}
	if daemon := os.Getenv("HBXTEST_LISTEN_DAEMON"); daemon != "" {
		// A double-forked listener: its parent exits at once, so it is
		// no descendant of this process, only in its process group. It
		// lives until this process exits and closes w.
		r, w, err := os.Pipe()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer w.Close()
		hop := exec.Command(os.Args[0])
		hop.Env = append(os.Environ(), "HBXTEST_LISTEN=", "HBXTEST_DAEMON_HOP="+daemon)
		pr, pw, err := os.Pipe()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		hop.Stdin, hop.Stdout, hop.Stderr = r, pw, os.Stderr
		if err := hop.Run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		r.Close()
		pw.Close()
		line, _ := bufio.NewReader(pr).ReadString('\n')
		fmt.Print(line)
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until EOF
	return 0
}

func TestAPIHealth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte(`{"status":"ok"}`))
		case "/degraded":
			w.Write([]byte(`{"status":"degraded","db":"slow"}`))
		case "/plain":
			w.Write([]byte(`OK`))
		case "/nostatus":
			w.Write([]byte(`{"healthy":true}`))
		case "/upper":
			w.Write([]byte(`{"status":"OK"}`))
		case "/number":
			w.Write([]byte(`{"status":1}`))
		case "/null":
			w.Write([]byte(`{"status":null}`))
		case "/keyed":
			if r.Header.Get("Authorization") != "Bearer k1" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Write([]byte(`{"status":"ok"}`))
		case "/slow":
			<-r.Context().Done() // until the client gives up
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/down":
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"unhealthy"}`))
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
		{srv.URL + "/degraded", `200 but status "degraded", want "ok"`},
		{srv.URL + "/upper", `200 but status "OK", want "ok"`},
		{srv.URL + "/number", `200 but status 1, want "ok"`},
		{srv.URL + "/null", `200 but status null, want "ok"`},
		{srv.URL + "/keyed", "401 Unauthorized"},
		{srv.URL + "/bad", "503 Service Unavailable"},
		{srv.URL + "/down", `503 Service Unavailable, status "unhealthy"`},
		{srv.URL + "/plain", "200 but the body is not a JSON object"},
		{srv.URL + "/nostatus", "200 but the body has no status field"},
		{srv.URL + "/redirect", "302 Found"},
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
	// With the key: a payload that refuses every request without it is
	// judged by its answer with it; a wrong key is its refusal.
	if err := APIHealthKey(context.Background(), srv.URL+"/keyed", NewKey("k1")); err != nil {
		t.Errorf("APIHealthKey(/keyed, right key) = %v, want nil", err)
	}
	if err := APIHealthKey(context.Background(), srv.URL+"/keyed", NewKey("k2")); !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "k2") {
		t.Errorf("APIHealthKey(/keyed, wrong key) = %v, want a 401 without the key", err)
	}
	if err := APIHealthKey(context.Background(), srv.URL+"/degraded", NewKey("k1")); err == nil || !strings.Contains(err.Error(), `"degraded"`) {
		t.Errorf("APIHealthKey(/degraded) = %v, want the degraded status", err)
	}
}
