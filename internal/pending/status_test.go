package pending

import (
	"errors"
	"testing"

	"github.com/hermesbox/hbx/supervisor"
)

// TestStatusReport: hbx status's error names the programs not RUNNING
// and the change together, exiting 3 for either (the text:
// internal/ui's TestStatusText).
func TestStatusReport(t *testing.T) {
	list := []supervisor.Status{{Name: "executor", State: supervisor.Running, Detail: "pid 1"}, {Name: "hermes", State: supervisor.Fatal}}
	change := &ChangeError{msg: "upgrade to x interrupted"}
	rep := &StatusReport{Programs: list, Change: change, Note: "ignored"}
	var nr *supervisor.NotRunningError
	var cp *ChangeError
	if err := rep.Err(); !errors.As(err, &nr) || !errors.As(err, &cp) || err.Error() != "not running: hermes (FATAL); "+change.Error() {
		t.Errorf("Err(both) = %v, want not running and the change", err)
	}
	rep = &StatusReport{Programs: list[:1], Note: "data kept in /d.rolled-back"}
	if rep.Err() != nil {
		t.Errorf("Err(note) = %v, want nil", rep.Err())
	}
	if rep = (&StatusReport{Programs: list[:1], Change: change}); !errors.As(rep.Err(), &cp) {
		t.Errorf("Err(change only) = %v, want the change", rep.Err())
	}
	// After Text, the error names the change briefly, still exit 3.
	awaited := &ChangeError{msg: "a long message naming IMAGE and what to run", brief: "restored data awaits runtime IMAGE"}
	rep = &StatusReport{Programs: list, Change: awaited}
	if err := rep.ErrAfterText(); !errors.As(err, &nr) || !errors.As(err, &cp) ||
		err.Error() != "not running: hermes (FATAL); release change: restored data awaits runtime IMAGE" {
		t.Errorf("ErrAfterText() = %v, want not running and the brief change", err)
	}
	// A change without a brief form is named in full after Text too.
	rep = &StatusReport{Programs: list, Change: change}
	if err := rep.ErrAfterText(); err.Error() != rep.Err().Error() {
		t.Errorf("ErrAfterText() = %v, want Err() %v", err, rep.Err())
	}
}
