package supervisor

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
)

// tailFile writes the last n lines of the file at path to w. With a
// non-nil stop it then follows the file, polling every poll, until stop is
// closed: appended bytes are written as they come, a rotated file (new
// inode) is read from its start, a truncated one from its new end. flush
// is called after each write.
func tailFile(path string, n int, stop <-chan struct{}, poll time.Duration, w io.Writer, flush func()) error {
	f, err := os.Open(path)
	if err != nil && (stop == nil || !errors.Is(err, os.ErrNotExist)) {
		return err
	}
	if f != nil {
		defer func() { f.Close() }()
		off, err := lastLines(f, n)
		if err != nil {
			return err
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.Copy(w, f); err != nil {
			return err
		}
		flush()
	}
	if stop == nil {
		return nil
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-t.C:
		}
		if f != nil {
			if _, err := io.Copy(w, f); err != nil {
				return err
			}
		}
		st, err := os.Stat(path)
		if err != nil {
			continue // rotated away for a moment
		}
		if f != nil {
			cur, _ := f.Stat()
			pos, _ := f.Seek(0, io.SeekCurrent)
			if sameFile(cur, st) {
				if st.Size() < pos { // truncated
					if _, err := f.Seek(0, io.SeekStart); err != nil {
						return err
					}
				}
				flush()
				continue
			}
			f.Close()
		}
		if f, err = os.Open(path); err != nil {
			f = nil
			continue
		}
		if _, err := io.Copy(w, f); err != nil {
			return err
		}
		flush()
	}
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
