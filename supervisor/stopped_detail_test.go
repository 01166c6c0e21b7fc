package supervisor

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestStoppedDescriptionIsTheTime: a program stopped by a stop (and by a
// hold) is described, as supervisorctl status does, by when it stopped
// (StoppedTime, local time), not by "stopped", which repeated the state
// ("STOPPED   stopped"); a held one adds "(held)" without a leading
// space.
func TestStoppedDescriptionIsTheTime(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "stop", true: "hold"}[held], func(t *testing.T) {
			dir := progDir(t, "p")
			s := runSupervisor(t, Options{Programs: []Program{shProgram(t, dir, "p", `while :; do sleep 0.05; done`)}})
			waitState(t, s, "p", 20*time.Second, Running)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if held {
				_, release, err := s.Hold(ctx, "p")
				if err != nil {
					t.Fatalf("Hold(p) = %v", err)
				}
				defer release()
			} else if _, err := s.Stop(ctx, "p"); err != nil {
				t.Fatalf("Stop(p) = %v", err)
			}
			st := waitState(t, s, "p", 20*time.Second, Stopped)
			want := st.Since.Local().Format(StoppedTime)
			if held {
				want += " (held)"
			}
			if st.Detail != want {
				t.Errorf("Get(p).Detail = %q, want %q", st.Detail, want)
			}
			if line := Table([]Status{st}); strings.Contains(strings.ToLower(strings.TrimPrefix(line, "p")), "stopped  stopped") || strings.Count(strings.ToLower(line), "stopped") != 1 {
				t.Errorf("Table() = %q, want the state once, described by the time", line)
			}
		})
	}
}
