package supervisor

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/internal/regfile"
)

// tailFile writes the last n lines of the file at path to w. With a
// non-nil stop it then follows the file, polling every poll, until stop is
// closed: appended bytes are written as they come, a rotated file (new
// inode) is read from its start, a truncated one from its new end. flush
// is called after each write. path is in a directory the program's user
// controls and hbx reads it as root: it is opened without following a
// symlink at its end and without blocking (regfile.OpenNoFollow), so a
// symlink, FIFO or device there fails at once with regfile.ErrNotRegular
// (while following, it is skipped like an absent path).
func tailFile(path string, n int, stop <-chan struct{}, poll time.Duration, w io.Writer, flush func()) error {
	f, err := regfile.OpenNoFollow(path)
	if err != nil && (stop == nil || !errors.Is(err, os.ErrNotExist)) {
		return err
	}
	t := &tail{path: path, f: f, w: w, flush: flush}
	defer func() {
		if t.f != nil {
			t.f.Close()
		}
	}()
	if t.f != nil {
		if err := t.last(n); err != nil {
			return err
		}
	}
	if stop == nil {
		return nil
	}
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-ticker.C:
		}
		if err := t.poll(); err != nil {
			return err
		}
	}
}

// tail is a file being followed: f is the open one (nil while path is
// absent).
type tail struct {
	path  string
	f     *os.File
	w     io.Writer
	flush func()
}

// last writes the last n lines of t.f.
func (t *tail) last(n int) error {
	off, err := lastLines(t.f, n)
	if err != nil {
		return err
	}
	if _, err := t.f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(t.w, t.f); err != nil {
		return err
	}
	t.flush()
	return nil
}

// poll writes what was appended, goes back to the start of a truncated
// file, and opens and writes from its start a file rotated in at path (a
// path absent for a moment is tried again at the next poll).
func (t *tail) poll() error {
	if t.f != nil {
		if _, err := io.Copy(t.w, t.f); err != nil {
			return err
		}
	}
	st, err := os.Lstat(t.path)
	if err != nil {
		return nil // rotated away for a moment
	}
	if t.f != nil {
		cur, _ := t.f.Stat()
		pos, _ := t.f.Seek(0, io.SeekCurrent)
		if sameFile(cur, st) {
			if st.Size() < pos { // truncated
				if _, err := t.f.Seek(0, io.SeekStart); err != nil {
					return err
				}
			}
			t.flush()
			return nil
		}
		t.f.Close()
		t.f = nil
	}
	f, err := regfile.OpenNoFollow(t.path)
	if err != nil {
		return nil // absent again, or not a regular file
	}
	t.f = f
	if _, err := io.Copy(t.w, t.f); err != nil {
		return err
	}
	t.flush()
	return nil
}

func sameFile(a, b os.FileInfo) bool {
	as, ok1 := a.Sys().(*syscall.Stat_t)
	bs, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && as.Dev == bs.Dev && as.Ino == bs.Ino
}

// lastLines returns the offset of the start of the last n lines of f (a
// final line without a newline counts).
func lastLines(f *os.File, n int) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := st.Size()
	if n == 0 {
		return end, nil
	}
	const chunk = 32 << 10
	buf := make([]byte, chunk)
	pos, seen := end, 0
	skipLast := true // a newline that ends the file ends the last line
	for pos > 0 {
		size := int64(chunk)
		if pos < size {
			size = pos
		}
		pos -= size
		if _, err := f.ReadAt(buf[:size], pos); err != nil && err != io.EOF {
			return 0, err
		}
		b := buf[:size]
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != '\n' {
				skipLast = false
				continue
			}
			if skipLast && pos+int64(i) == end-1 {
				skipLast = false
				continue
			}
			seen++
			if seen == n {
				return pos + int64(i) + 1, nil
			}
		}
	}
	return 0, nil
}

// WriteLastLines writes the last n lines of f (open for reading) to w,
// without following it: hbx logs reads a log from disk this way when no
// supervisor runs.
func WriteLastLines(f *os.File, n int, w io.Writer) error {
	t := &tail{f: f, w: w, flush: func() {}}
	return t.last(n)
}
