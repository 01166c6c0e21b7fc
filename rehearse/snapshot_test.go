package rehearse

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// writeTree makes dir with files (name -> content, mode 0600) and links
// (name -> target).
func writeTree(t *testing.T, dir string, files, links map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSnapshotCopiesTheDataAsItStands: a still data directory is copied
// whole and said steady: files with their modes, subdirectories, links
// as links (never what they point to), and no SQLite -shm index.
func TestSnapshotCopiesTheDataAsItStands(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	writeTree(t, src, map[string]string{
		"data.db": "db pages", "data.db-wal": "wal frames", "data.db-shm": "index",
		"secret.key": "s3cret", "auth-secret.key": "auth", "sub/blob": "nested",
	}, map[string]string{"etc": "/etc", "passwd": "/etc/passwd"})
	if err := os.Chmod(filepath.Join(src, "secret.key"), 0o400); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	c, steady, err := snapshot(src, dst)
	if err != nil || !steady {
		t.Fatalf("snapshot = %v, steady %v; want a steady copy", err, steady)
	}
	if c.Files != 5 {
		t.Errorf("snapshot copied %d files, want 5 (no -shm)", c.Files)
	}
	for name, want := range map[string]string{"data.db": "db pages", "data.db-wal": "wal frames", "secret.key": "s3cret", "sub/blob": "nested"} {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != want {
			t.Errorf("copy of %s = %q, %v; want %q", name, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "data.db-shm")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data.db-shm was copied (Lstat: %v)", err)
	}
	if st, err := os.Stat(filepath.Join(dst, "secret.key")); err != nil || st.Mode().Perm() != 0o400 {
		t.Errorf("secret.key copy mode = %v, %v; want 0400", st.Mode(), err)
	}
	for name, want := range map[string]string{"etc": "/etc", "passwd": "/etc/passwd"} {
		if got, err := os.Readlink(filepath.Join(dst, name)); err != nil || got != want {
			t.Errorf("link %s copied as %q, %v; want a link to %s", name, got, err, want)
		}
	}
}

// written makes every snapshot see p written between its two passes,
// as a live database may be, until the returned stop is called.
func written(t *testing.T, p string) (stop func()) {
	t.Helper()
	var mu sync.Mutex
	on, n := true, 0
	betweenPasses = func() {
		mu.Lock()
		defer mu.Unlock()
		if !on {
			return
		}
		n++
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Error(err)
			return
		}
		f.WriteString("frame " + strconv.Itoa(n) + "\n")
		f.Close()
	}
	t.Cleanup(func() { betweenPasses = func() {} })
	return func() { mu.Lock(); on = false; mu.Unlock() }
}

// TestSnapshotSeesTheDataChange: a file written during the copy makes it
// unsteady (a torn copy is never used); so does a file that appears.
func TestSnapshotSeesTheDataChange(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	writeTree(t, src, map[string]string{"data.db": "pages", "data.db-wal": ""}, nil)
	stop := written(t, filepath.Join(src, "data.db-wal"))
	if _, steady, err := snapshot(src, filepath.Join(t.TempDir(), "copy")); err != nil || steady {
		t.Errorf("snapshot of a WAL written meanwhile = steady %v, %v; want unsteady", steady, err)
	}
	stop()
	betweenPasses = func() { os.WriteFile(filepath.Join(src, "new"), nil, 0o600) }
	if _, steady, err := snapshot(src, filepath.Join(t.TempDir(), "copy")); err != nil || steady {
		t.Errorf("snapshot with a file created meanwhile = steady %v, %v; want unsteady", steady, err)
	}
}

// TestCopyData: live copies while the data holds still; a hold (stopping
// the writer, as the supervisor stops Executor) when it never does; and
// ErrUnsteady without a hold.
func TestCopyData(t *testing.T) {
	for _, tc := range []struct {
		name     string
		written  bool
		hold     bool
		wantErr  error
		wantHeld bool
	}{
		{name: "still data, no hold", written: false},
		{name: "written data, held", written: true, hold: true, wantHeld: true},
		{name: "written data, no hold", written: true, wantErr: ErrUnsteady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "data")
			writeTree(t, src, map[string]string{"data.db": strings.Repeat("p", 1<<20), "data.db-wal": ""}, nil)
			stop := func() {}
			if tc.written {
				stop = written(t, filepath.Join(src, "data.db-wal"))
			}
			defer stop()
			o := Options{DataDir: src, Attempts: 2}
			held := false
			if tc.hold {
				o.Hold = func(context.Context) (func() error, error) {
					stop()
					held = true
					return func() error { return nil }, nil
				}
			}
			o.defaults()
			s, err := newScratch(src)
			if err != nil {
				t.Fatal(err)
			}
			defer s.remove(context.Background())
			res := &Result{}
			err = o.copyData(context.Background(), s, res)
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("copyData = %v, want %v", err, tc.wantErr)
			}
			if held != tc.wantHeld || (res.Held > 0) != tc.wantHeld {
				t.Errorf("copyData held = %v (Held %s), want %v", held, res.Held, tc.wantHeld)
			}
			if err == nil {
				if b, err := os.ReadFile(filepath.Join(s.data(), "data.db")); err != nil || len(b) != 1<<20 {
					t.Errorf("copied data.db: %d bytes, %v", len(b), err)
				}
			}
		})
	}
}

// TestSnapshotSkipsAFileSwappedForAFIFO: a listed file the payload
// swaps for a FIFO before the copy opens it is left out, as the next
// pass leaves it out; the copy never waits for a writer that never
// comes (which held hbx upgrade in open(2)).
func TestSnapshotSkipsAFileSwappedForAFIFO(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	writeTree(t, src, map[string]string{"data.db": "db pages", "queue": "jobs"}, nil)
	fifo := filepath.Join(src, "queue")
	beforeOpen = func(rel string) {
		if rel == "queue" {
			os.Remove(fifo)
			if err := unix.Mkfifo(fifo, 0o600); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() { beforeOpen = func(string) {} })
	type result struct {
		c      Copied
		steady bool
		err    error
	}
	done := make(chan result, 1)
	go func() {
		c, steady, err := snapshot(src, filepath.Join(t.TempDir(), "copy"))
		done <- result{c, steady, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || !r.steady || r.c.Files != 1 {
			t.Errorf("snapshot() = %+v, %v, %v; want 1 file, steady", r.c, r.steady, r.err)
		}
	case <-time.After(30 * time.Second):
		// Let the blocked open return so the test ends.
		if w, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("snapshot still opening the FIFO after 30s")
	}
}

// TestSnapshotPointsLinksToTheDataAtTheCopy: a link in the data that
// names a file of the live data directory by absolute path (as given, or
// through a symlinked parent) names the copy's file in the copy, so the
// rehearsed release never writes the live data through it; relative
// links and links outside the data are kept.
func TestSnapshotPointsLinksToTheDataAtTheCopy(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Symlink(real, filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "alias", "data")
	resolved := filepath.Join(real, "data")
	writeTree(t, resolved, map[string]string{"db/main.db": "pages"}, map[string]string{
		"abs":      filepath.Join(src, "db", "main.db"),
		"resolved": filepath.Join(resolved, "db", "main.db"),
		"root":     src,
		"rel":      "db/main.db",
		"outside":  "/etc/hostname",
		"sibling":  src + "-other/x",
	})
	dst := filepath.Join(t.TempDir(), "copy")
	if _, steady, err := snapshot(src, dst); err != nil || !steady {
		t.Fatalf("snapshot() = %v, %v", steady, err)
	}
	for name, want := range map[string]string{
		"abs":      filepath.Join(dst, "db", "main.db"),
		"resolved": filepath.Join(dst, "db", "main.db"),
		"root":     dst,
		"rel":      "db/main.db",
		"outside":  "/etc/hostname",
		"sibling":  src + "-other/x",
	} {
		if got, err := os.Readlink(filepath.Join(dst, name)); err != nil || got != want {
			t.Errorf("copy's link %s -> %q, %v; want -> %q", name, got, err, want)
		}
	}
}
