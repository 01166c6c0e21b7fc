package upgrade

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRecoveryFailureNamesTheWayOut proves that a recovery of an
// interrupted change that cannot succeed (a journal in phase activating
// without a backup, as a damaged or forged upgrade.json; a restore that
// fails) says, through hbx rollback and hbx supervise's Recover, how to
// get out: move upgrade.json away once the release and the data are
// checked by hand. hbx install refuses while the journal is unfinished and
// names hbx rollback; before, rollback's error named nothing to do, and
// install stayed refused for ever.
func TestRecoveryFailureNamesTheWayOut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backup  string
		failRst error
	}{
		{name: "no backup recorded"},
		{name: "restore fails", backup: "/b/pre-upgrade.tar.gz.gpg", failRst: errors.New("archive gone")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, opts := newFake(t)
			f.cur, f.prev, f.failRestore = newRel, oldRel, tc.failRst
			if err := os.MkdirAll(opts.RuntimeDir, 0o755); err != nil {
				t.Fatal(err)
			}
			j := &Journal{Old: oldRel, New: newRel, Backup: tc.backup}
			if err := j.write(opts.RuntimeDir, PhaseActivating, time.Now()); err != nil {
				t.Fatal(err)
			}
			opts.Services = nil
			want := "move " + journalPath(opts.RuntimeDir) + " away once the active release (hbx status) and the data directory are checked by hand"
			_, rerr := Rollback(context.Background(), opts)
			_, cerr := Recover(context.Background(), opts)
			for name, err := range map[string]error{"Rollback": rerr, "Recover": cerr} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s() = %v, want it to say %q", name, err, want)
				}
			}
			if tc.failRst != nil && !errors.Is(rerr, tc.failRst) || tc.failRst == nil && !errors.Is(rerr, ErrMismatch) {
				t.Errorf("Rollback() = %v, want the cause kept", rerr)
			}
		})
	}
}

// TestCancelledRecoveryNamesNoWayOut: a recovery whose restore was
// cancelled (Ctrl-C) or timed out keeps its cause and does not tell the
// operator to move upgrade.json away: running it again may succeed.
func TestCancelledRecoveryNamesNoWayOut(t *testing.T) {
	for _, cause := range []error{context.Canceled, context.DeadlineExceeded} {
		t.Run(cause.Error(), func(t *testing.T) {
			f, opts := newFake(t)
			f.cur, f.prev, f.failRestore = newRel, oldRel, fmt.Errorf("restore: %w", cause)
			if err := os.MkdirAll(opts.RuntimeDir, 0o755); err != nil {
				t.Fatal(err)
			}
			j := &Journal{Old: oldRel, New: newRel, Backup: "/b/pre-upgrade.tar.gz.gpg"}
			if err := j.write(opts.RuntimeDir, PhaseActivating, time.Now()); err != nil {
				t.Fatal(err)
			}
			opts.Services = nil
			_, err := Rollback(context.Background(), opts)
			if !errors.Is(err, cause) || strings.Contains(err.Error(), "move "+journalPath(opts.RuntimeDir)+" away") {
				t.Errorf("Rollback() = %v; want %v kept and no \"move upgrade.json away\"", err, cause)
			}
		})
	}
}
