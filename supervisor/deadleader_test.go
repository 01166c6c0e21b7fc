package supervisor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDeadLeaderLeftoversStoppedFast: when a program's leader exits on
// its own (kill -9), what is left of its process group (here a grandchild
// that ignores SIGTERM, as Executor's workerd children do) is stopped at
// once: stopsignal, then SIGKILL after LeftoverGrace, not stopwaitsecs.
// Meanwhile the program is EXITED, never RUNNING without a pid, and its
// status says the old group is draining, for how long, and that a restart
// follows.
func TestDeadLeaderLeftoversStoppedFast(t *testing.T) {
	const grace, stopWait = time.Second, 30 * time.Second
	dir := progDir(t, "tree")
	p := helperProgram(t, dir, "tree", "bun-tree", "")
	p.StopWait = stopWait
	s := runSupervisor(t, Options{Programs: []Program{p}, LeftoverGrace: grace})
	first := waitState(t, s, "tree", 30*time.Second, Running)
	ps := pids(t, dir) // leader and grandchild
	if len(ps) != 2 || ps[0] != first.PID {
		t.Fatalf("pids = %v, want leader %d and its grandchild", ps, first.PID)
	}
	killed := time.Now()
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var draining Status
	for {
		st := s.Get("tree")
		if st.State == Running && st.PID == 0 {
			t.Fatalf("status %s %q: RUNNING without a process", st.State, st.Detail)
		}
		if st.State == Exited && draining.Detail == "" {
			draining = st // the first EXITED status
		}
		if st.State == Running && st.PID != first.PID {
			break
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("not RUNNING again 20s after the kill: %s %q", st.State, st.Detail)
		}
		time.Sleep(2 * time.Millisecond)
	}
	took := time.Since(killed)
	for _, want := range []string{"terminated by SIGKILL (unexpected)", "restarting once the rest of its process group is gone", "to exit (for ", "SIGKILL in "} {
		if !strings.Contains(draining.Detail, want) {
			t.Errorf("status while the old group drains = %s %q, want it to say %q", draining.State, draining.Detail, want)
		}
	}
	if draining.PID != 0 || strings.Contains(draining.Detail, "uptime") || strings.Contains(draining.Detail, "pid 0") {
		t.Errorf("status while the old group drains = pid %d %q, want no pid and no uptime", draining.PID, draining.Detail)
	}
	if procAlive(ps[1]) {
		t.Errorf("the old grandchild %d is still alive after the restart", ps[1])
	}
	ts := starts(t, dir)
	for deadline := time.Now().Add(30 * time.Second); len(ts) < 2 && time.Now().Before(deadline); ts = starts(t, dir) {
		time.Sleep(5 * time.Millisecond) // the new process records its start as it comes up
	}
	if len(ts) != 2 || ts[1].Sub(killed) < grace || took > stopWait/2 {
		t.Errorf("restarted %v after the kill (starts %v), want after the leftover grace %s and well before stopwaitsecs %s", took, ts, grace, stopWait)
	}
	t.Logf("while draining: %s %q; RUNNING again after %s", draining.State, draining.Detail, took.Round(time.Millisecond))
}

// TestDeadLeaderStopAndStartWhileDraining: a stop asked while a dead
// leader's group drains waits until it is gone and starts nothing; a start
// asked then (autorestart false) starts once it is gone.
func TestDeadLeaderStopAndStartWhileDraining(t *testing.T) {
	for _, verb := range []string{"stop", "start"} {
		t.Run(verb, func(t *testing.T) {
			dir := progDir(t, "tree")
			p := helperProgram(t, dir, "tree", "bun-tree", "")
			p.StopWait = 30 * time.Second
			p.Autorestart = AutorestartFalse
			// The grandchild ignores SIGTERM, so the group drains for the
			// whole grace: long enough that the verb below, however slow a
			// loaded machine is to get to it, is asked while it drains.
			s := runSupervisor(t, Options{Programs: []Program{p}, LeftoverGrace: 3 * time.Second})
			first := waitState(t, s, "tree", 30*time.Second, Running)
			ps := pids(t, dir)
			if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			st := waitState(t, s, "tree", 30*time.Second, Exited)
			if !strings.Contains(st.Detail, "waiting for process group") {
				t.Fatalf("status after the kill = %s %q, want the old group draining", st.State, st.Detail)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var res []Result
			var err error
			if verb == "stop" {
				res, err = s.Stop(ctx, "tree")
			} else {
				res, err = s.Start(ctx, "tree")
			}
			wantState := map[string]State{"stop": Stopped, "start": Running}[verb]
			if err != nil || len(res) != 1 || res[0].State != wantState || res[0].Error != "" {
				t.Fatalf("%s while draining = %+v, %v; want %s", verb, res, err, wantState)
			}
			if procAlive(ps[1]) {
				t.Errorf("%s returned with the old grandchild %d alive", verb, ps[1])
			}
			want := map[string]int{"stop": 1, "start": 2}[verb]
			n := len(starts(t, dir))
			for deadline := time.Now().Add(30 * time.Second); n < want && time.Now().Before(deadline); n = len(starts(t, dir)) {
				time.Sleep(5 * time.Millisecond) // the new process records its start as it comes up
			}
			if n != want {
				t.Errorf("%d starts after %s, want %d", n, verb, want)
			}
		})
	}
}

// procAlive reports whether pid exists and is not a zombie (a killed
// orphan stays a zombie until the supervisor's reaper gets to it).
func procAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return !(i > 0 && len(b) > i+2 && b[i+2] == 'Z')
}

// TestDrainTimes: the status of a draining group says for how long it has
// drained and when its SIGKILL is, or was, due.
func TestDrainTimes(t *testing.T) {
	from := time.Unix(1000, 0)
	for _, tt := range []struct {
		from, killAt, now time.Time
		want              string
	}{
		{time.Time{}, time.Time{}, from, ""},
		{from, from.Add(200 * time.Millisecond), from.Add(50 * time.Millisecond), " (for 0.05s; SIGKILL in 0.15s)"},
		{from, from.Add(200 * time.Millisecond), from.Add(300 * time.Millisecond), " (for 0.30s; SIGKILL sent)"},
		{from, from.Add(15 * time.Second), from.Add(2 * time.Second), " (for 2.00s; SIGKILL in 13.00s)"},
	} {
		if got := drainTimes(tt.from, tt.killAt, tt.now); got != tt.want {
			t.Errorf("drainTimes(%v, %v, %v) = %q, want %q", tt.from, tt.killAt, tt.now, got, tt.want)
		}
	}
}

// TestFailedStartLeftoversShown: a start whose leader exits too quickly
// leaving a child that ignores SIGTERM says, while the child gets its
// leftover grace, which group it waits for.
func TestFailedStartLeftoversShown(t *testing.T) {
	dir := progDir(t, "quick")
	p := helperProgram(t, dir, "quick", "leave-child", "")
	p.StartSecs = 5 * time.Second // it exits after 200ms: too quickly
	p.StopWait = 30 * time.Second
	s := runSupervisor(t, Options{Programs: []Program{p}, LeftoverGrace: 2 * time.Second})
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := s.Get("quick")
		if st.State == Starting && strings.Contains(st.Detail, "exited too quickly") {
			if !strings.Contains(st.Detail, "waiting for process group") || !strings.Contains(st.Detail, "SIGKILL in") {
				t.Fatalf("status after a failed start with a leftover = %s %q, want the group it waits for", st.State, st.Detail)
			}
			t.Logf("status: %s %q", st.State, st.Detail)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failed start seen in 20s: %s %q", st.State, st.Detail)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
