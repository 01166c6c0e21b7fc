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
