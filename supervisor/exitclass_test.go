package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// shProgram is a program running script with /bin/sh in dir, each run
// appending its pid to dir/starts first.
func shProgram(t *testing.T, dir, name, script string) Program {
	t.Helper()
	return Program{
		Name:         name,
		Command:      []string{"/bin/sh", "-c", `echo $$ >> "$D/starts"; ` + script},
		Environment:  []string{"D=" + dir},
		Autostart:    true,
		Autorestart:  AutorestartTrue,
		StartSecs:    100 * time.Millisecond,
		StartRetries: 3,
		StopWait:     5 * time.Second,
		Stdout:       LogFile{Path: filepath.Join(dir, name+".out.log")},
		Stderr:       LogFile{Path: filepath.Join(dir, name+".err.log")},
	}
}

// runCount is how many times a shProgram started.
func runCount(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "starts"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// TestFatalExitCode: an exit with a fatal exit code, during start-up or
// from RUNNING, makes the program FATAL at once (no retry, whatever
// autorestart and startretries say), the code and its last stderr line
// in the reason.
func TestFatalExitCode(t *testing.T) {
	for _, tc := range []struct{ name, script string }{
		{"starting", `echo "warming up" >&2; echo "config: platform token missing" >&2; exit 78`},
		{"running", `echo "warming up" >&2; sleep 0.5; printf 'config: platform token missing' >&2; exit 78`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := progDir(t, "p")
			p := shProgram(t, dir, "p", tc.script)
			p.FatalExitCodes = []int{78}
			p.RestartExitCodes = []int{75}
			s := runSupervisor(t, Options{Programs: []Program{p}, BackoffBase: 10 * time.Second})
			st := waitState(t, s, "p", 20*time.Second, Fatal)
			for _, want := range []string{"exit status 78", "fatal exit code", "last stderr line: config: platform token missing"} {
				if !strings.Contains(st.Detail, want) {
					t.Errorf("FATAL detail = %q, want it to hold %q", st.Detail, want)
				}
			}
			if n := runCount(t, dir); n != 1 {
				t.Errorf("the program ran %d times, want 1", n)
			}
		})
	}
}

// TestRestartExitCode: an exit with a restart exit code starts the
// program again at once: no backoff (BackoffBase is 10 s) and no failed
// start counted (startretries 0 would make a counted one FATAL), also
// with autorestart false.
func TestRestartExitCode(t *testing.T) {
	dir := progDir(t, "p")
	p := shProgram(t, dir, "p", `[ "$(wc -l < "$D/starts")" -lt 3 ] && exit 75; exec sleep 1000`)
	p.RestartExitCodes = []int{75}
	p.StartRetries = 0
	p.Autorestart = AutorestartFalse
	// The first two runs exit during start-up, which a loaded machine may
	// stretch to hundreds of milliseconds: startsecs far above that keeps
	// them failed starts (the case under test), not exits from RUNNING.
	p.StartSecs = 3 * time.Second
	start := time.Now()
	s := runSupervisor(t, Options{Programs: []Program{p}, BackoffBase: 10 * time.Second})
	waitState(t, s, "p", 20*time.Second, Running)
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("RUNNING after %s, want no backoff of 10s", took)
	}
	if n := runCount(t, dir); n != 3 {
		t.Errorf("the program ran %d times, want 3", n)
	}
}

// TestExitAfterStopIsExpected: an exit that follows the supervisor's own
// stop is expected whatever its code: a fatal or a restart code then
// leaves the program STOPPED, not FATAL, not started again.
func TestExitAfterStopIsExpected(t *testing.T) {
	for _, code := range []string{"78", "75", "1"} {
		t.Run(code, func(t *testing.T) {
			dir := progDir(t, "p")
			p := shProgram(t, dir, "p", `trap 'exit `+code+`' TERM; : > "$D/trapped"; while :; do sleep 0.05; done`)
			p.FatalExitCodes, p.RestartExitCodes = []int{78}, []int{75}
			s := runSupervisor(t, Options{Programs: []Program{p}})
			waitState(t, s, "p", 20*time.Second, Running)
			// RUNNING comes after startsecs, which a loaded machine reaches
			// before the shell set its trap (the stop would then end it by
			// SIGTERM, not by the code under test): wait for the trap.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(filepath.Join(dir, "trapped")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the program never set its trap")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := s.Stop(ctx, "p"); err != nil {
				t.Fatalf("Stop(p) = %v", err)
			}
			time.Sleep(300 * time.Millisecond) // a wrong restart would have begun
			if st := s.Get("p"); st.State != Stopped || runCount(t, dir) != 1 {
				t.Errorf("after the stop: %s %q, ran %d times; want STOPPED, once", st.State, st.Detail, runCount(t, dir))
			}
		})
	}
}

// TestExitClassesChecked: New refuses codes outside 0-255 and a code in
// both classes.
func TestExitClassesChecked(t *testing.T) {
	for _, tc := range []struct {
		name           string
		restart, fatal []int
		want           string
	}{
		{"out of range", []int{256}, nil, "exit code 256 (want 0-255)"},
		{"negative", nil, []int{-1}, "exit code -1 (want 0-255)"},
		{"both", []int{75}, []int{75, 78}, "exit code 75 is both a restart and a fatal exit code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := shProgram(t, t.TempDir(), "p", "exit 0")
			p.RestartExitCodes, p.FatalExitCodes = tc.restart, tc.fatal
			_, err := New(Options{Programs: []Program{p}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLastLine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"none", nil, ""},
		{"ended", []string{"a\nb\n"}, "b"},
		{"blank lines after", []string{"a\n", "\n  \n"}, "a"},
		{"pending", []string{"a\nb", "c"}, "bc"},
		{"long", []string{strings.Repeat("x", 1000) + "\n"}, strings.Repeat("x", lastLineMax)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l lastLine
			for _, w := range tc.writes {
				if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := l.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}
