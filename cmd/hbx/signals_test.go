package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// With HBXTEST_EARLY_SIGNALS=ARGS the test binary does what main does
// first for ARGS, then sends itself HUP, USR1 and QUIT: it exits 0 when
// QUIT ended main's context, 3 after 60s.
func init() {
	if args := os.Getenv("HBXTEST_EARLY_SIGNALS"); args != "" {
		ctx, _ := signal.NotifyContext(context.Background(), stopSignals([]string{"--config", "x.yaml", args})...)
		for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGQUIT} {
			syscall.Kill(os.Getpid(), sig)
		}
		select {
		case <-ctx.Done():
			os.Exit(0)
		case <-time.After(60 * time.Second):
			os.Exit(3)
		}
	}
	if os.Getenv("HBXTEST_LATE_SIGNAL") == "1" {
		code := mainCode([]string{"version"}, io.Discard, os.Stderr)
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		time.Sleep(300 * time.Millisecond)
		os.Exit(code)
	}
}

// TestSignalAfterTheWorkIsDone: a Ctrl-C that reaches hbx after its
// command returned, before the process exits, does not kill it by the
// default action (TestInterruptDuringRestoreE2E saw a committed restore
// end "killed by SIGINT", no line said): hbx exits with the command's
// status. With HBXTEST_LATE_SIGNAL=1 the test binary runs `hbx version`
// as main does, then sends itself SIGINT and exits 300ms later.
func TestSignalAfterTheWorkIsDone(t *testing.T) {
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), "HBXTEST_LATE_SIGNAL=1")
	out, err := c.CombinedOutput()
	ws, _ := c.ProcessState.Sys().(syscall.WaitStatus)
	if err != nil {
		t.Errorf("hbx version, then SIGINT: %v (signaled %v: %v), want exit 0\n%.300s", err, ws.Signaled(), ws.Signal(), out)
	}
}

// TestSuperviseCatchesSignalsFromTheStart: the signals of a supervisor
// that arrive before its handlers exist (the configuration is still
// loading) do not end `hbx supervise` by their default action (HUP killed
// it, QUIT dumped its goroutines); QUIT still stops it. Other commands
// keep the defaults.
func TestSuperviseCatchesSignalsFromTheStart(t *testing.T) {
	tests := []struct {
		command string
		wantSig syscall.Signal // 0: exits 0, its context ended by QUIT
	}{
		{"supervise", 0},
		{"status", syscall.SIGHUP},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			c := exec.Command(os.Args[0])
			c.Env = append(os.Environ(), "HBXTEST_EARLY_SIGNALS="+tt.command)
			out, err := c.CombinedOutput()
			ws, _ := c.ProcessState.Sys().(syscall.WaitStatus)
			switch {
			case tt.wantSig == 0 && err != nil:
				t.Errorf("hbx %s: %v (signal %v), want exit 0 on QUIT after HUP and USR1\n%.300s", tt.command, err, ws.Signal(), out)
			case tt.wantSig != 0 && (!ws.Signaled() || ws.Signal() != tt.wantSig):
				t.Errorf("hbx %s: %v, want killed by %v (the default)", tt.command, err, tt.wantSig)
			}
		})
	}
}
