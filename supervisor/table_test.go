package supervisor

import (
	"errors"
	"testing"
)

func TestTableAndNotRunning(t *testing.T) {
	list := []Status{
		{Name: "executor", State: Running, Detail: "pid 12, uptime 0:00:03"},
		{Name: "a-long-name", State: Fatal, Detail: "exited too quickly"},
		{Name: "w", State: Backoff},
	}
	want := "executor     RUNNING   pid 12, uptime 0:00:03\n" +
		"a-long-name  FATAL     exited too quickly\n" +
		"w            BACKOFF   \n"
	if got := Table(list); got != want {
		t.Errorf("Table() =\n%q, want\n%q", got, want)
	}
	if got := Table(list[2:]); got != "w         BACKOFF   \n" {
		t.Errorf("Table(short name) = %q, want the name padded to 8", got)
	}
	err := NotRunning(list)
	var nr *NotRunningError
	if !errors.As(err, &nr) || err.Error() != "not running: a-long-name (FATAL), w (BACKOFF)" {
		t.Errorf("NotRunning() = %v, want a *NotRunningError naming a-long-name and w", err)
	}
	if err := NotRunning(list[:1]); err != nil {
		t.Errorf("NotRunning(all running) = %v, want nil", err)
	}
}

// TestControlText: hbx start/stop/restart's lines and failure count.
func TestControlText(t *testing.T) {
	res := []Result{{Name: "executor", State: Running}, {Name: "hermes", State: Fatal, Error: "exited too quickly"}}
	text, err := ControlText("start", res)
	if want := "executor: started\nhermes: ERROR (FATAL: exited too quickly)\n"; text != want {
		t.Errorf("ControlText(start) = %q, want %q", text, want)
	}
	if !errors.Is(err, ErrSomeFailed) || err.Error() != "some programs failed: 1 of 2 not started (see above)" {
		t.Errorf("ControlText(start) error = %v, want ErrSomeFailed counting 1 of 2", err)
	}
	already := []Result{{Name: "executor", State: Running, Already: true}, {Name: "hermes", State: Stopped, Already: true}}
	if text, err := ControlText("start", already[:1]); text != "executor: already RUNNING\n" || err != nil {
		t.Errorf("ControlText(start, already) = %q, %v; want executor: already RUNNING", text, err)
	}
	if text, err := ControlText("stop", already[1:]); text != "hermes: already STOPPED\n" || err != nil {
		t.Errorf("ControlText(stop, already) = %q, %v; want hermes: already STOPPED", text, err)
	}
	if text, err := ControlText("restart", res[:1]); text != "executor: restarted\n" || err != nil {
		t.Errorf("ControlText(restart, ok) = %q, %v", text, err)
	}
	if _, err := (&Client{}).Control(t.Context(), "reload"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Control(reload) = %v, want ErrInvalid", err)
	}
}
