package datadir

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPrune(t *testing.T) {
	for _, keep := range []int{-1, 0, 1, 2, 5} {
		root := t.TempDir()
		data := filepath.Join(root, "data")
		names := []string{"data.pre-restore-20261201T100000Z", "data.pre-restore-20261201T090000Z", "data.pre-restore-20261202T000000Z"}
		for _, n := range names {
			// A read-only directory below: RemoveTree makes it writable.
			if err := os.MkdirAll(filepath.Join(root, n, "ro"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, n, "ro", "f"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(root, n, "ro"), 0o500); err != nil {
				t.Fatal(err)
			}
		}
		// Not copies: a file with the prefix, another infix, another base.
		for _, n := range []string{"data.pre-restore-file", "data.rolled-back-20261201T000000Z", "database.pre-restore-20261201T000000Z"} {
			if n == "data.pre-restore-file" {
				os.WriteFile(filepath.Join(root, n), nil, 0o600)
			} else {
				os.Mkdir(filepath.Join(root, n), 0o700)
			}
		}
		removed, err := Prune(data, PreRestore, keep)
		if err != nil {
			t.Fatalf("Prune(keep %d) = %v", keep, err)
		}
		sorted := slices.Sorted(slices.Values(names))
		n := len(sorted) - min(max(keep, 0), len(sorted))
		var want []string
		for _, s := range sorted[:n] {
			want = append(want, filepath.Join(root, s))
		}
		if !slices.Equal(removed, want) {
			t.Errorf("Prune(keep %d) removed %q, want %q (oldest first)", keep, removed, want)
		}
		ents, _ := os.ReadDir(root)
		if got := len(ents); got != 3+len(sorted)-n {
			t.Errorf("Prune(keep %d) left %d entries, want %d", keep, got, 3+len(sorted)-n)
		}
	}
}

func TestRemoveTreeMissing(t *testing.T) {
	if err := RemoveTree(""); err != nil {
		t.Errorf("RemoveTree(\"\") = %v", err)
	}
	if err := RemoveTree(filepath.Join(t.TempDir(), "none")); err != nil {
		t.Errorf("RemoveTree(missing) = %v", err)
	}
}

// TestPruneSpare: a spared copy (the one the caller just made) stays and
// counts as one of the keep newest, even when its name is the oldest.
func TestPruneSpare(t *testing.T) {
	for _, tc := range []struct {
		keep int
		want []string // removed, oldest first
	}{
		{0, []string{"data.rolled-back-20301201T000000Z", "data.rolled-back-20301202T000000Z"}},
		{1, []string{"data.rolled-back-20301201T000000Z", "data.rolled-back-20301202T000000Z"}},
		{2, []string{"data.rolled-back-20301201T000000Z"}},
		{3, nil},
	} {
		root := t.TempDir()
		data := filepath.Join(root, "data")
		own := "data.rolled-back-20261201T101500Z" // made after the clock was set back
		for _, n := range []string{own, "data.rolled-back-20301201T000000Z", "data.rolled-back-20301202T000000Z"} {
			if err := os.Mkdir(filepath.Join(root, n), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		removed, err := Prune(data, RolledBack, tc.keep, filepath.Join(root, own))
		if err != nil {
			t.Fatalf("Prune(keep %d) = %v", tc.keep, err)
		}
		var want []string
		for _, n := range tc.want {
			want = append(want, filepath.Join(root, n))
		}
		if !slices.Equal(removed, want) {
			t.Errorf("Prune(keep %d, spare %s) removed %q, want %q", tc.keep, own, removed, want)
		}
		if _, err := os.Stat(filepath.Join(root, own)); err != nil {
			t.Errorf("Prune(keep %d) removed the spared copy: %v", tc.keep, err)
		}
	}
}
