package rehearse

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/datadir"
)

// TestScratchIsPrivate: the scratch directory is beside the data
// directory, named as internal/datadir says, mode 0700, and gone after
// remove.
func TestScratchIsPrivate(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := newScratch(data)
	if err != nil {
		t.Fatal(err)
	}
	if !datadir.Rehearsal.Of("data", filepath.Base(s.dir)) || filepath.Dir(s.dir) != filepath.Dir(data) {
		t.Errorf("scratch %s: want %s<random> beside the data", s.dir, datadir.Rehearsal.Path(data, ""))
	}
	st, err := os.Stat(s.dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("scratch mode = %v, %v; want 0700", st.Mode(), err)
	}
	if err := s.remove(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("scratch still there after remove: %v", err)
	}
}

// holder starts sleep holding f open (as the rehearsed payload holds
// the held file) and returns it; the test kills it at the end.
func holder(t *testing.T, f *os.File) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	return cmd
}

// alive reports whether cmd's process has not been reaped or killed.
func alive(cmd *exec.Cmd) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// TestRemoveLeftovers: what a killed rehearsal left is removed, and the
// process still holding its held file is killed; a held file replaced by
// a link to another file (the scratch was the payload's) kills nobody,
// and a directory named like a scratch directory without a held file
// (another box's data directory) is left as it is.
func TestRemoveLeftovers(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	left, err := newScratch(data)
	if err != nil {
		t.Fatal(err)
	}
	payload := holder(t, left.held)
	left.held.Close()

	other := filepath.Join(dir, "other")
	f, err := os.Create(other)
	if err != nil {
		t.Fatal(err)
	}
	bystander := holder(t, f)
	f.Close()
	linked := datadir.Rehearsal.Path(data, "linked")
	if err := os.Mkdir(linked, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(linked, HeldFile)); err != nil {
		t.Fatal(err)
	}

	otherBox := datadir.Rehearsal.Path(data, "prod")
	writeTree(t, otherBox, map[string]string{"data.db": "another box's data"}, nil)

	gone, kept, err := removeLeftovers(context.Background(), data, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gone, []string{left.dir}) {
		t.Errorf("removeLeftovers removed %q, want the leftover %s only", gone, left.dir)
	}
	if slices.Sort(kept); !slices.Equal(kept, []string{linked, otherBox}) {
		t.Errorf("removeLeftovers left %q, want %q", kept, []string{linked, otherBox})
	}
	if _, err := os.Lstat(left.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover %s still there: %v", left.dir, err)
	}
	if b, err := os.ReadFile(filepath.Join(otherBox, "data.db")); err != nil || string(b) != "another box's data" {
		t.Errorf("another box's data directory %s: %q, %v; want untouched", otherBox, b, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for alive(payload) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(payload) {
		t.Errorf("the leftover's process %d still runs", payload.Process.Pid)
	}
	if !alive(bystander) {
		t.Errorf("the process holding the file a planted link names was killed")
	}
	if _, err := os.Stat(data); err != nil {
		t.Errorf("the data directory itself: %v", err)
	}
}

// TestPlantedHeldLinkKillsNobody: a held file replaced by a hard link to
// another file of this user (the scratch directory is the payload's once
// filled; with fs.protected_hardlinks off any user may link any file) is
// not the rehearsal's: neither the next rehearsal's leftover removal nor
// the rehearsal's own removal kills the process that holds that file.
func TestPlantedHeldLinkKillsNobody(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(t *testing.T, data string, s *scratch) error
	}{
		{name: "leftover removed by the next rehearsal", remove: func(t *testing.T, data string, s *scratch) error {
			s.held.Close()
			s.held = nil
			_, _, err := removeLeftovers(context.Background(), data, slog.New(slog.DiscardHandler))
			return err
		}},
		{name: "scratch removed by its own rehearsal", remove: func(t *testing.T, data string, s *scratch) error {
			return s.remove(context.Background())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			if err := os.Mkdir(data, 0o700); err != nil {
				t.Fatal(err)
			}
			other := filepath.Join(dir, "other")
			f, err := os.Create(other)
			if err != nil {
				t.Fatal(err)
			}
			bystander := holder(t, f)
			f.Close()
			s, err := newScratch(data)
			if err != nil {
				t.Fatal(err)
			}
			held := filepath.Join(s.dir, HeldFile)
			if err := os.Remove(held); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(other, held); err != nil {
				t.Fatal(err)
			}
			if err := tc.remove(t, data, s); err != nil {
				t.Fatal(err)
			}
			if !alive(bystander) {
				t.Errorf("the process holding the file a planted hard link names was killed")
			}
		})
	}
}
