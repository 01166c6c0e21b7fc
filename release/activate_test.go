package release

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPublishSwitchCleanup: Publish puts a staged tree at releases/<hex>
// (swapping one already there), SwitchCurrent moves previous then current,
// and Cleanup keeps exactly what current and previous name, removing
// staging, scratch, temporaries, other releases and the blob cache.
func TestPublishSwitchCleanup(t *testing.T) {
	rd := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	mk := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(rd, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name string) string {
		t.Helper()
		target, err := os.Readlink(filepath.Join(rd, name))
		if err != nil {
			return ""
		}
		return target
	}
	mk(ReleasesDir)
	for _, hex := range []string{"a", "b", "c"} {
		mk(filepath.Join(StagingDir, hex, RootfsDir))
		if err := Publish(rd, filepath.Join(rd, StagingDir, hex), hex, log); err != nil {
			t.Fatalf("Publish(%s) = %v", hex, err)
		}
		if err := SwitchCurrent(rd, hex); err != nil {
			t.Fatalf("SwitchCurrent(%s) = %v", hex, err)
		}
	}
	if link(CurrentLink) != "releases/c" || link(PreviousLink) != "releases/b" {
		t.Fatalf("links = current %q, previous %q; want releases/c, releases/b", link(CurrentLink), link(PreviousLink))
	}
	// A second publish of c swaps it in; the old tree is left at staging.
	mk(filepath.Join(StagingDir, "c2", RootfsDir, "new"))
	if err := Publish(rd, filepath.Join(rd, StagingDir, "c2"), "c", log); err != nil {
		t.Fatalf("Publish(c again) = %v", err)
	}
	if _, err := os.Stat(filepath.Join(rd, ReleasesDir, "c", RootfsDir, "new")); err != nil {
		t.Errorf("releases/c after a second Publish: %v, want the new tree", err)
	}
	// SwitchCurrent to the current release leaves previous alone.
	if err := SwitchCurrent(rd, "c"); err != nil || link(PreviousLink) != "releases/b" {
		t.Errorf("SwitchCurrent(c) again = %v, previous %q; want releases/b", err, link(PreviousLink))
	}
	mk(ScratchDir)
	mk(filepath.Join(BlobsDir, "sha256"))
	if err := os.WriteFile(filepath.Join(rd, BlobsDir, "sha256", "ab"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !HasLeftovers(rd, false) {
		t.Fatal("HasLeftovers() = false with staging, tmp, blobs and releases/a, want true")
	}
	if n, size := CompleteBlobs(filepath.Join(rd, BlobsDir)); n != 1 || size != 1 {
		t.Errorf("CompleteBlobs() = %d, %d; want 1, 1", n, size)
	}
	Cleanup(rd, false, log)
	ents, _ := os.ReadDir(rd)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{CurrentLink, PreviousLink, ReleasesDir}; !slices.Equal(names, want) {
		t.Errorf("runtime directory after Cleanup = %q, want %q", names, want)
	}
	rels, _ := os.ReadDir(filepath.Join(rd, ReleasesDir))
	if len(rels) != 2 || rels[0].Name() != "b" || rels[1].Name() != "c" {
		t.Errorf("releases after Cleanup = %v, want b and c", rels)
	}
	if HasLeftovers(rd, false) {
		t.Error("HasLeftovers() after Cleanup = true, want false")
	}
}

// TestSetPrevious: SetPrevious points previous at a release on disk
// (current untouched), and removes previous, saying so, when the release
// is missing or damaged or no release is named; removing an absent
// previous is no error.
func TestSetPrevious(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hex       string
		wantFound bool
		wantLink  string // "": no previous
	}{
		{name: "on disk", hex: "a", wantFound: true, wantLink: "releases/a"},
		{name: "none named", hex: "", wantFound: true},
		{name: "missing", hex: "gone", wantFound: false},
		{name: "damaged", hex: "broken", wantFound: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := t.TempDir()
			for _, hex := range []string{"a", "b", "c", "broken"} {
				if err := os.MkdirAll(filepath.Join(rd, ReleasesDir, hex, RootfsDir), 0o755); err != nil {
					t.Fatal(err)
				}
				if hex == "broken" {
					continue
				}
				m := `{"format":1,"manifest_digest":"sha256:` + strings.Repeat(hex, 64) + `"}`
				if err := os.WriteFile(filepath.Join(rd, ReleasesDir, hex, MetaFile), []byte(m), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for name, target := range map[string]string{CurrentLink: "releases/b", PreviousLink: "releases/c"} {
				if err := os.Symlink(target, filepath.Join(rd, name)); err != nil {
					t.Fatal(err)
				}
			}
			found, err := SetPrevious(rd, tc.hex)
			if err != nil || found != tc.wantFound {
				t.Fatalf("SetPrevious(%q) = %v, %v; want %v, nil", tc.hex, found, err, tc.wantFound)
			}
			if got, _ := os.Readlink(filepath.Join(rd, PreviousLink)); got != tc.wantLink {
				t.Errorf("previous after SetPrevious(%q) = %q, want %q", tc.hex, got, tc.wantLink)
			}
			if got, _ := os.Readlink(filepath.Join(rd, CurrentLink)); got != "releases/b" {
				t.Errorf("current after SetPrevious(%q) = %q, want releases/b untouched", tc.hex, got)
			}
			// Again (a retry after a kill): the same result, no error.
			if found, err := SetPrevious(rd, tc.hex); err != nil || found != tc.wantFound {
				t.Errorf("SetPrevious(%q) again = %v, %v; want %v, nil", tc.hex, found, err, tc.wantFound)
			}
			if ents, _ := os.ReadDir(rd); len(ents) != 2+min(len(tc.wantLink), 1) {
				t.Errorf("runtime directory holds %d entries, want no temporaries left", len(ents))
			}
		})
	}
}
