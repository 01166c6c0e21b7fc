package rehearse

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/testenv"
)

// freeBytes is what statfs says is free on dir's filesystem.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// TestRunRefusesACopyThatWouldFillTheDisk: data whose copy would not fit
// beside it with MinFree to spare (here the payload's sparse file, whose
// holes the copy writes out; the same for an honest data directory larger
// than the free space) is refused before anything is copied: the live
// programs, writing on that filesystem, never meet a full disk, and no
// scratch directory is left.
func TestRunRefusesACopyThatWouldFillTheDisk(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sparse int64 // apparent size of data/big, no blocks
		real   int   // bytes written to data/small
	}{
		{name: "sparse file larger than the filesystem", sparse: 1 << 30},
		{name: "copy that would leave less than MinFree", real: 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := testenv.Tmpfs(t, "32m")
			data := filepath.Join(parent, "data")
			if err := os.Mkdir(data, 0o700); err != nil {
				t.Fatal(err)
			}
			if tc.sparse > 0 {
				if err := os.WriteFile(filepath.Join(data, "big"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(filepath.Join(data, "big"), tc.sparse); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(data, "small"), make([]byte, tc.real), 0o600); err != nil {
				t.Fatal(err)
			}
			free := freeBytes(t, parent)
			_, err := Run(context.Background(), Options{DataDir: data, Attempts: 1})
			if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "must leave") {
				t.Fatalf("Run() = %v, want ErrNoSpace with the numbers", err)
			}
			if got := freeBytes(t, parent); got != free {
				t.Errorf("free space %d after the refusal, want %d as before", got, free)
			}
			ents, _ := os.ReadDir(parent)
			ents = slices.DeleteFunc(ents, func(e os.DirEntry) bool { return e.Name() == filepath.Base(datadir.RehearsalLock(data)) })
			if len(ents) != 1 {
				t.Errorf("%s holds %d entries after the refusal, want only data/ (and the rehearsal lock)", parent, len(ents))
			}
		})
	}
}
