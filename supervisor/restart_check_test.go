package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRestartCheckRefusesBeforeStop proves that a Restart whose
// Program.Check fails stops nothing: the error (a *RefusedError, over the
// socket too) says "restart NAME: ERR; nothing stopped", and the program
// keeps its pid and RUNNING; with a Check that passes it restarts.
func TestRestartCheckRefusesBeforeStop(t *testing.T) {
	notInstalled := errors.New("run `hbx install` first: release does not match the configuration")
	for _, tc := range []struct {
		name     string
		check    error
		viaAPI   bool
		wantErr  bool
		wantSame bool
	}{
		{name: "check fails", check: notInstalled, wantErr: true, wantSame: true},
		{name: "check fails over the socket", check: notInstalled, viaAPI: true, wantErr: true, wantSame: true},
		{name: "check passes", check: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := progDir(t, "prog")
			p := helperProgram(t, dir, "prog", "sleep", "")
			checked := make(chan struct{}, 4)
			p.Check = func(context.Context) error {
				checked <- struct{}{}
				return tc.check
			}
			sockDir, err := os.MkdirTemp("", "hbx")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(sockDir) })
			sock := filepath.Join(sockDir, "hbx.sock")
			s := runSupervisor(t, Options{Programs: []Program{p}, Socket: sock})
			before := waitState(t, s, "prog", 30*time.Second, Running)
			// RUNNING is startsecs after the spawn, which a loaded machine
			// reaches before the helper recorded its start: wait for it.
			waitStarts(t, dir, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			restart := s.Restart
			if tc.viaAPI {
				c, err := Dial(ctx, sock)
				if err != nil {
					t.Fatal(err)
				}
				restart = c.Restart
			}
			res, err := restart(ctx, "prog")
			if len(checked) != 1 {
				t.Errorf("Check ran %d times, want once", len(checked))
			}
			if tc.wantErr {
				want := "restart prog: " + notInstalled.Error() + "; nothing stopped"
				if !errors.Is(err, ErrRefused) || err.Error() != want {
					t.Fatalf("Restart() = %v, %v; want %q wrapping ErrRefused", res, err, want)
				}
			} else if err != nil || len(res) != 1 || res[0].Error != "" {
				t.Fatalf("Restart() = %v, %v; want prog restarted", res, err)
			}
			after := waitState(t, s, "prog", 30*time.Second, Running)
			if same := after.PID == before.PID; same != tc.wantSame {
				t.Errorf("pid %d before, %d after the restart; want the same: %v", before.PID, after.PID, tc.wantSame)
			}
			wantStarts := 2
			if tc.wantSame {
				wantStarts = 1
			}
			waitStarts(t, dir, wantStarts)
			if n := len(starts(t, dir)); n != wantStarts {
				t.Errorf("%d starts, want %d", n, wantStarts)
			}
			if tc.wantSame && (!strings.Contains(after.State.String(), "RUNNING") || gone(before.PID)) {
				t.Errorf("after a refused restart: %s, pid %d gone %v; want it RUNNING", after.State, before.PID, gone(before.PID))
			}
		})
	}
}

// waitStarts waits up to 30s until the helper in dir recorded n starts.
func waitStarts(t *testing.T, dir string, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); len(starts(t, dir)) < n && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}
