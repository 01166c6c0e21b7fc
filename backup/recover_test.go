package backup

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/lock"
)

// TestRecover lays out, by hand, every state a killed restore can leave
// and checks that Recover finishes or undoes it: the data directory ends
// entirely old (not confirmed) or entirely new (confirmed), and nothing
// else is left.
func TestRecover(t *testing.T) {
	const ts = "20260101T000000Z"
	for _, tc := range []struct {
		name    string
		phase   string
		existed bool
		// layout moves the trees as the restore had when it died: old is
		// the data before, new the staged archive.
		layout  func(t *testing.T, data, staging, old string)
		wantNew bool
	}{
		{"staging", phaseStaging, true, func(*testing.T, string, string, string) {}, false},
		{"before the swap", phaseSwapping, true, func(*testing.T, string, string, string) {}, false},
		{"after the exchange", phaseSwapping, true, func(t *testing.T, data, staging, old string) { must(t, exchange(staging, data)) }, false},
		{"after the exchange and the rename", phaseSwapping, true, func(t *testing.T, data, staging, old string) {
			must(t, exchange(staging, data))
			must(t, renameNoReplace(staging, old))
		}, false},
		{"an undo that swapped back", phaseSwapping, true, func(t *testing.T, data, staging, old string) {
			must(t, exchange(staging, data))
			must(t, renameNoReplace(staging, old))
			must(t, exchange(old, data))
		}, false},
		{"no data directory before, renamed in", phaseSwapping, false, func(t *testing.T, data, staging, old string) {
			must(t, renameNoReplace(staging, data))
		}, false},
		{"committed", phaseCommitted, true, func(t *testing.T, data, staging, old string) {
			must(t, exchange(staging, data))
			must(t, renameNoReplace(staging, old))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t)
			staging, old := datadir.Staging.Path(b.data, ts), datadir.PreRestore.Path(b.data, ts)
			write(t, b.data, "db 0600 old database", "keys/ 0700", "keys/k 0600 old key")
			oldTree := snapshot(t, b.data)
			must(t, os.Mkdir(staging, 0o700))
			write(t, staging, "db 0600 new database", "extra 0644 only in the archive")
			newTree := snapshot(t, staging)
			j := &journal{Format: 1, Phase: tc.phase, Started: time.Now(), Archive: "a.tar.gz.gpg", Keep: 1,
				Roots: []journalRoot{{Target: b.data, Staging: staging, Old: old, Existed: tc.existed}}}
			j.Roots[0].StagingID, _, _ = statID(staging)
			if tc.existed {
				j.Roots[0].TargetID, _, _ = statID(b.data)
			} else {
				must(t, os.RemoveAll(b.data))
			}
			// An older pre-restore copy, for pruning.
			must(t, os.Mkdir(datadir.PreRestore.Path(b.data, "20250101T000000Z"), 0o700))
			must(t, j.write(b.data))
			tc.layout(t, b.data, staging, old)

			msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime})
			if err != nil || msg == "" {
				t.Fatalf("Recover() = %q, %v; want a description", msg, err)
			}
			switch {
			case tc.wantNew:
				if diff := cmp.Diff(snapshot(t, b.data), newTree); diff != "" {
					t.Errorf("data after Recover (-got +want new):\n%s", diff)
				}
			case !tc.existed:
				if _, err := os.Lstat(b.data); !os.IsNotExist(err) {
					t.Errorf("data directory after Recover: %v, want none (there was none before)", err)
				}
			default:
				if diff := cmp.Diff(snapshot(t, b.data), oldTree); diff != "" {
					t.Errorf("data after Recover (-got +want old):\n%s", diff)
				}
			}
			want := []string{"data"}
			if !tc.existed {
				want = nil
			}
			switch {
			case tc.phase == phaseCommitted:
				want = append(want, datadir.PreRestore.Path("data", ts)) // Keep 1: the older copy is pruned
			default:
				want = append(want, datadir.PreRestore.Path("data", "20250101T000000Z"))
			}
			if diff := cmp.Diff(listing(t, filepath.Dir(b.data)), want); diff != "" {
				t.Errorf("beside the data directory (-got +want):\n%s", diff)
			}
			if msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime}); msg != "" || err != nil {
				t.Errorf("second Recover() = %q, %v; want nothing to do", msg, err)
			}
		})
	}
}

// TestRecoverLeavesARunningRestore: while another process holds the lock
// (a restore still running), Recover touches nothing.
func TestRecoverLeavesARunningRestore(t *testing.T) {
	b := newBox(t)
	j := &journal{Format: 1, Phase: phaseStaging, Roots: []journalRoot{{Target: b.data, Staging: datadir.Staging.Path(b.data, "x")}}}
	must(t, os.Mkdir(j.Roots[0].Staging, 0o700))
	must(t, j.write(b.data))
	lk, err := lock.Acquire(context.Background(), filepath.Join(b.runtime, LockFile), "hbx restore", 0, nil)
	must(t, err)
	defer lk.Unlock()
	if msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime}); msg != "" || err != nil {
		t.Errorf("Recover() under another's lock = %q, %v; want nothing", msg, err)
	}
	if _, err := os.Stat(j.Roots[0].Staging); err != nil {
		t.Errorf("staging of the running restore: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fakeRelease is Runtime and Config for recovery tests: the active
// release and the config file's pin, as image names.
type fakeRelease struct {
	active, pinned string
	calls          []string
}

func (f *fakeRelease) Install(_ context.Context, image, _ string, _ digest.Digest) (bool, error) {
	f.calls = append(f.calls, "install "+image)
	changed := f.active != image
	f.active = image
	return changed, nil
}
func (f *fakeRelease) Pinned() (string, digest.Digest, error) { return f.pinned, "", nil }
func (f *fakeRelease) CanPin() error                          { return nil }
func (f *fakeRelease) Pin(image string, _ digest.Digest) error {
	f.calls = append(f.calls, "pin "+image)
	f.pinned = image
	return nil
}

// TestRecoverRuntimeAndPin: a restore killed after it recorded a release
// change is undone in the reverse order (pin, data, runtime) whichever
// step it reached, and the message says exactly what was put back (issue
// 12: "nothing had changed" while the runtime stayed switched).
func TestRecoverRuntimeAndPin(t *testing.T) {
	for _, tc := range []struct {
		name             string
		phase            string
		active, pinned   string // what the kill left
		swapped          bool
		wantCalls        []string
		wantSay, wantNot []string
	}{
		{"staging, before the switch", phaseStaging, "v1", "v1", false,
			[]string{"install v1"}, []string{"nothing had changed"}, []string{"active again", "pins"}},
		{"staging, after the switch", phaseStaging, "v2", "v1", false,
			[]string{"install v1"}, []string{"the runtime active before it (v1) is active again"}, []string{"nothing had changed", "pins", "data from before"}},
		{"swapped, before the pin", phaseSwapping, "v2", "v1", true,
			[]string{"install v1"}, []string{"data from before it is back", "(v1) is active again"}, []string{"pins"}},
		{"swapped and pinned", phaseSwapping, "v2", "v2", true,
			[]string{"pin v1", "install v1"}, []string{"the config file pins v1 again", "data from before it is back", "(v1) is active again"}, []string{"nothing had changed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t)
			const ts = "20260101T000000Z"
			staging, old := datadir.Staging.Path(b.data, ts), datadir.PreRestore.Path(b.data, ts)
			write(t, b.data, "db 0600 old database")
			oldTree := snapshot(t, b.data)
			must(t, os.Mkdir(staging, 0o700))
			write(t, staging, "db 0600 new database")
			j := &journal{Format: 1, Phase: tc.phase, Started: time.Now(), Archive: "a.tar.gz.gpg",
				Roots:   []journalRoot{{Target: b.data, Staging: staging, Old: old, Existed: true}},
				Runtime: &journalRuntime{PriorImage: "v1", Pin: &journalPin{PriorImage: "v1", Image: "v2"}}}
			j.Roots[0].StagingID, _, _ = statID(staging)
			j.Roots[0].TargetID, _, _ = statID(b.data)
			must(t, j.write(b.data))
			if tc.swapped {
				must(t, exchange(staging, b.data))
				must(t, renameNoReplace(staging, old))
			}
			f := &fakeRelease{active: tc.active, pinned: tc.pinned}
			msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime, Runtime: f, Config: f})
			if err != nil {
				t.Fatalf("Recover() = %v", err)
			}
			if diff := cmp.Diff(f.calls, tc.wantCalls); diff != "" {
				t.Errorf("calls (-got +want):\n%s", diff)
			}
			if f.active != "v1" || f.pinned != "v1" {
				t.Errorf("after Recover: active %s, pinned %s; want v1, v1", f.active, f.pinned)
			}
			if diff := cmp.Diff(snapshot(t, b.data), oldTree); diff != "" {
				t.Errorf("data after Recover (-got +want old):\n%s", diff)
			}
			for _, s := range tc.wantSay {
				if !strings.Contains(msg, s) {
					t.Errorf("Recover() says %q, want it to say %q", msg, s)
				}
			}
			for _, s := range tc.wantNot {
				if strings.Contains(msg, s) {
					t.Errorf("Recover() says %q, want it not to say %q", msg, s)
				}
			}
		})
	}
}

// TestRecoverWithoutRuntimeKeepsJournal: a recovery that cannot switch
// the runtime back (no Runtime) puts the data back but keeps the journal
// and says so, naming it and the commands that finish the undo; it never
// tells the operator to run hbx install (which follows the pin, not the
// data). A later recovery with a Runtime finishes it.
func TestRecoverWithoutRuntimeKeepsJournal(t *testing.T) {
	b := newBox(t)
	const ts = "20260101T000000Z"
	staging, old := datadir.Staging.Path(b.data, ts), datadir.PreRestore.Path(b.data, ts)
	write(t, b.data, "db 0600 old database")
	oldTree := snapshot(t, b.data)
	must(t, os.Mkdir(staging, 0o700))
	write(t, staging, "db 0600 new database")
	j := &journal{Format: 1, Phase: phaseSwapping, Started: time.Now(), Archive: "a.tar.gz.gpg",
		Roots:   []journalRoot{{Target: b.data, Staging: staging, Old: old, Existed: true}},
		Runtime: &journalRuntime{PriorImage: "v1"}}
	j.Roots[0].StagingID, _, _ = statID(staging)
	j.Roots[0].TargetID, _, _ = statID(b.data)
	must(t, j.write(b.data))
	must(t, exchange(staging, b.data))
	must(t, renameNoReplace(staging, old))

	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime, Logger: log})
	if !errors.Is(err, ErrRestoreHalfDone) {
		t.Fatalf("Recover() without a Runtime = %q, %v; want ErrRestoreHalfDone", msg, err)
	}
	for _, w := range []string{journalPath(b.data), "is kept", "`hbx backup`", "`hbx supervise`", "v1"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Recover() error %q does not say %q", err, w)
		}
	}
	if strings.Contains(err.Error()+logs.String(), "hbx install") {
		t.Errorf("Recover() tells the operator to run hbx install: %v\n%s", err, logs.String())
	}
	if _, err := os.Stat(journalPath(b.data)); err != nil {
		t.Errorf("the journal is gone: %v", err)
	}
	if diff := cmp.Diff(snapshot(t, b.data), oldTree); diff != "" {
		t.Errorf("data after Recover (-got +want old):\n%s", diff)
	}
	if p, err := ReadPendingRestore(b.data); err != nil || p == nil || !p.Unfinished() || p.Archive != "a.tar.gz.gpg" {
		t.Errorf("ReadPendingRestore() = %+v, %v; want the unfinished restore of a.tar.gz.gpg", p, err)
	}

	f := &fakeRelease{active: "v2", pinned: "v1"}
	msg, err = Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime, Runtime: f, Config: f})
	if err != nil || !strings.Contains(msg, "(v1) is active again") {
		t.Fatalf("Recover() with a Runtime = %q, %v; want the runtime switched back", msg, err)
	}
	if _, err := os.Stat(journalPath(b.data)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the journal is left after the full undo: %v", err)
	}
	if diff := cmp.Diff(snapshot(t, b.data), oldTree); diff != "" {
		t.Errorf("data after the second Recover (-got +want old):\n%s", diff)
	}
}
