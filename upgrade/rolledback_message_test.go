package upgrade

import (
	"context"
	"errors"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// TestRolledBackMessage: an upgrade rolled back after activation fails
// with one line that says "rolled back" once, names the release back in
// place, the cause and where the replaced data is, naming the release
// that ran on it (not "the new runtime": an upgrade to an older pin
// rolls back to the newer one) or saying it never started, and, when
// the new release ran, where its own account of the failure is
// (LogsHint). Before, every such line said "the data written by the new
// runtime", also after a downgrade and when nothing had run.
func TestRolledBackMessage(t *testing.T) {
	boom := errors.New("boom")
	older := Release{Target: release.Target{Image: "r/e:v0@" + string(digest.FromString("i0")), Platform: "linux/amd64", IndexDigest: digest.FromString("i0"), ManifestDigest: digest.FromString("m0")}}
	for _, tc := range []struct {
		name   string
		setup  func(*fake)
		target Release
		want   string // after "upgrade: ", with %k for the kept-aside path
	}{
		{name: "health fails", setup: func(f *fake) { f.failHealth = boom }, target: newRel,
			want: "rolled back to " + oldRel.Image + ": health on " + newRel.Image + ": boom; the data " + newRel.Image + " ran on is kept in %k; " + LogsHint},
		{name: "health fails on an older pin", setup: func(f *fake) { f.failHealth, f.staged = boom, older }, target: older,
			want: "rolled back to " + oldRel.Image + ": health on " + older.Image + ": boom; the data " + older.Image + " ran on is kept in %k; " + LogsHint},
		{name: "activation fails", setup: func(f *fake) { f.failActivate = boom }, target: newRel,
			want: "rolled back to " + oldRel.Image + ": activate: boom; " + newRel.Image + " never started, the replaced data is kept in %k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, opts := newFake(t)
			tc.setup(f)
			_, err := Upgrade(context.Background(), opts, Target{Target: release.Target{Image: tc.target.Image, IndexDigest: tc.target.IndexDigest}})
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
