package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLivenessWhileRunning: a RUNNING program's readiness probe keeps
// running as a liveness check (Hermes: gateway_state.json written within
// 120 s and saying running); a state file gone stale (its age injected by
// setting its mtime back) or saying another state is said in
// Status.Unhealthy and Detail, naming the file and its age, without a
// restart (no wedge detection); it clears once the file is fresh again.
func TestLivenessWhileRunning(t *testing.T) {
	dir := progDir(t, "p")
	state := filepath.Join(dir, "gateway_state.json")
	p := shProgram(t, dir, "p", `printf '{"gateway_state": "running"}' > "$D/gateway_state.json"; exec sleep 1000`)
	p.Probe = Readiness{JSONFile: state, JSONField: "gateway_state", JSONValue: "running", MaxAge: time.Hour}.Probe()
	p.HealthWait, p.HealthInterval = time.Minute, 20*time.Millisecond
	var s *Supervisor
	runSupervisor(t, Options{Programs: []Program{p}}, &s)
	waitState(t, s, "p", 30*time.Second, Running)
	waitUnhealthy := func(want string) Status {
		t.Helper()
		var st Status
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if st = s.Get("p"); (want == "" && st.Unhealthy == "") || (want != "" && strings.Contains(st.Unhealthy, want)) {
				return st
			}
		}
		t.Fatalf("Get(p) = %+v, want Unhealthy %q", st, want)
		return st
	}
	for _, tc := range []struct {
		name  string
		apply func() error
		want  string
	}{
		{"stale", func() error {
			old := time.Now().Add(-2 * time.Hour)
			return os.Chtimes(state, old, old)
		}, "state " + state + " is stale (written 2h0m"},
		{"fresh again", func() error { return os.Chtimes(state, time.Now(), time.Now()) }, ""},
		{"another state", func() error { return os.WriteFile(state, []byte(`{"gateway_state": "draining"}`), 0o644) },
			"state " + state + ` says gateway_state "draining", want "running"`},
		{"running again", func() error { return os.WriteFile(state, []byte(`{"gateway_state": "running"}`), 0o644) }, ""},
	} {
		if err := tc.apply(); err != nil {
			t.Fatal(err)
		}
		st := waitUnhealthy(tc.want)
		if st.State != Running {
			t.Errorf("%s: state = %s, want RUNNING (no wedge detection: no restart)", tc.name, st.State)
		}
		if tc.want != "" && !strings.Contains(st.Detail, "; not live: "+tc.want) {
			t.Errorf("%s: Detail = %q, want it to say not live: %q", tc.name, st.Detail, tc.want)
		}
	}
	if n := runCount(t, dir); n != 1 {
		t.Errorf("the program started %d times, want 1", n)
	}
}
