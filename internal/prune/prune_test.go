package prune

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/release/releasetest"
)

func names(t *testing.T, rd string) []string {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(rd, release.ReleasesDir))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestReleases: Releases keeps current, previous and both sides of a
// pending release change with the release previous named when it began
// (its rollback points previous back there), removes the rest, and removes nothing when the
// restore journal cannot be read; a held lock makes it give up (the
// command's change stands, the note says why).
func TestReleases(t *testing.T) {
	rd, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	ms := map[string]release.Meta{}
	for _, n := range []string{"cur", "prev", "old", "new", "before", "junk"} {
		ms[n] = releasetest.Write(t, rd, n)
	}
	for link, n := range map[string]string{release.CurrentLink: "cur", release.PreviousLink: "prev"} {
		if err := os.Symlink(filepath.Join(release.ReleasesDir, ms[n].ManifestDigest.Encoded()), filepath.Join(rd, link)); err != nil {
			t.Fatal(err)
		}
	}
	j, _ := json.Marshal(map[string]any{"format": 1, "phase": "activating",
		"old":      release.Target{IndexDigest: ms["old"].IndexDigest, ManifestDigest: ms["old"].ManifestDigest},
		"new":      release.Target{IndexDigest: ms["new"].IndexDigest, ManifestDigest: ms["new"].ManifestDigest},
		"previous": map[string]any{"release": release.Target{IndexDigest: ms["before"].IndexDigest, ManifestDigest: ms["before"].ManifestDigest}}})
	if err := os.WriteFile(filepath.Join(rd, "upgrade.json"), j, 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{RuntimeDir: rd, DataDir: data, KeepBlobs: true, Command: "hbx test", Log: slog.New(slog.DiscardHandler)}

	// An unreadable restore journal: nothing removed.
	if err := os.WriteFile(data+".restore.json", []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := Releases(context.Background(), o); err == nil || len(p.Releases) != 0 || len(names(t, rd)) != 6 {
		t.Errorf("Releases(bad restore journal) = %+v, %v with %d releases left; want an error, all 6 kept", p, err, len(names(t, rd)))
	} else if note := Note(p, err); !strings.HasPrefix(note, "old releases not pruned: ") {
		t.Errorf("Note() = %q, want it to say nothing was pruned", note)
	}
	os.Remove(data + ".restore.json")

	// A held lock: gives up at once (LockWait 0).
	lk, err := release.LockExisting(context.Background(), rd, "another", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Releases(context.Background(), o); err == nil || !strings.Contains(err.Error(), "another") {
		t.Errorf("Releases(lock held) = %v, want the holder named", err)
	}
	lk.Unlock()

	p, err := Releases(context.Background(), o)
	if err != nil {
		t.Fatalf("Releases() = %v", err)
	}
	if want := []string{ms["junk"].ManifestDigest.Encoded()}; !slices.Equal(p.Releases, want) {
		t.Errorf("Releases() removed %q, want only junk %q", p.Releases, want)
	}
	if got := len(names(t, rd)); got != 5 {
		t.Errorf("%d releases left, want 5", got)
	}
	if note := Note(p, nil); !strings.HasPrefix(note, "pruned old releases: removed 1 release (") {
		t.Errorf("Note() = %q", note)
	}
}

// TestKeep: a target with a manifest digest keeps exactly that release;
// one with only an index digest keeps its platform's (any platform when
// it names none).
func TestKeep(t *testing.T) {
	m := release.Meta{IndexDigest: digest.FromString("i"), ManifestDigest: digest.FromString("m"), Platform: "linux/arm64"}
	for _, tc := range []struct {
		name string
		t    release.Target
		want bool
	}{
		{"manifest", release.Target{ManifestDigest: m.ManifestDigest}, true},
		{"other manifest, same index", release.Target{IndexDigest: m.IndexDigest, ManifestDigest: digest.FromString("x")}, false},
		{"index and platform", release.Target{IndexDigest: m.IndexDigest, Platform: "linux/arm64"}, true},
		{"index, other platform", release.Target{IndexDigest: m.IndexDigest, Platform: "linux/amd64"}, false},
		{"index, no platform", release.Target{IndexDigest: m.IndexDigest}, true},
		{"empty", release.Target{}, false},
	} {
		if got := Keep([]release.Target{tc.t})(m); got != tc.want {
			t.Errorf("Keep(%s)(m) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestReleasesKeepAwaited: with data restored but not started (its
// journal awaits a release and records the one active before it),
// Releases keeps both, though neither is current nor previous, and
// removes the rest.
func TestReleasesKeepAwaited(t *testing.T) {
	rd, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	ms := map[string]release.Meta{}
	for _, n := range []string{"cur", "prev", "awaited", "prior", "junk"} {
		ms[n] = releasetest.Write(t, rd, n)
	}
	for link, n := range map[string]string{release.CurrentLink: "cur", release.PreviousLink: "prev"} {
		if err := os.Symlink(filepath.Join(release.ReleasesDir, ms[n].ManifestDigest.Encoded()), filepath.Join(rd, link)); err != nil {
			t.Fatal(err)
		}
	}
	j, _ := json.Marshal(map[string]any{"format": 1, "phase": "not-started", "archive": "a.tar.gz.gpg",
		"awaiting": map[string]any{"image": ms["awaited"].Image, "index_digest": ms["awaited"].IndexDigest, "platform": "linux/amd64"},
		"runtime":  map[string]any{"changed": true, "prior_manifest": ms["prior"].ManifestDigest}})
	if err := os.WriteFile(data+".restore.json", j, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Releases(context.Background(), Options{RuntimeDir: rd, DataDir: data, KeepBlobs: true, Command: "hbx test", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("Releases() = %v", err)
	}
	if want := []string{ms["junk"].ManifestDigest.Encoded()}; !slices.Equal(p.Releases, want) {
		t.Errorf("Releases() removed %q, want only junk %q (the awaited and the prior release stay)", p.Releases, want)
	}
}
