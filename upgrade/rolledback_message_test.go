package upgrade

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/release"
)

// TestRolledBackMessage: an upgrade rolled back after activation fails
// with one line that says "rolled back" once, names the release back in
// place, the cause and where the replaced data is, and, when the new
// release ran, where its own account of the failure is (LogsHint).
func TestRolledBackMessage(t *testing.T) {
	boom := errors.New("boom")
	kept := "; the data written by the new runtime is kept in "
	for _, tc := range []struct {
		name  string
		setup func(*fake)
		want  string // after "upgrade: ", with %k for the kept-aside path
	}{
		{name: "health fails", setup: func(f *fake) { f.failHealth = boom },
			want: "rolled back to " + oldRel.Image + ": health on " + newRel.Image + ": boom" + kept + "%k; " + LogsHint},
		{name: "activation fails", setup: func(f *fake) { f.failActivate = boom },
			want: "rolled back to " + oldRel.Image + ": activate: boom" + kept + "%k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, opts := newFake(t)
			tc.setup(f)
			_, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: newRel.Image, IndexDigest: newRel.IndexDigest}})
			if !errors.Is(err, ErrRolledBack) || !errors.Is(err, boom) {
				t.Fatalf("Upgrade() = %v, want ErrRolledBack wrapping the cause", err)
			}
			got := "upgrade: " + err.Error()
			want := "upgrade: " + strings.ReplaceAll(tc.want, "%k", opts.DataDir+".rolled-back-20261129T100000Z")
			if got != want {
				t.Errorf("error =\n%s\nwant\n%s", got, want)
			}
			if n := strings.Count(got, "rolled back"); n != 1 || strings.Contains(got, "\n") {
				t.Errorf("error says \"rolled back\" %d times (want once) or spans lines: %s", n, got)
			}
		})
	}
}
