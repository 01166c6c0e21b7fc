package release

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// FileList reads files.json one entry at a time, so memory does not grow
// with the number of files. Close releases it.
type FileList struct {
	f   *os.File
	dec *json.Decoder
}

// OpenFiles opens the release's files.json for reading entry by entry.
// Errors wrap ErrCorrupt when it is missing or does not start a JSON array.
func (i *Installed) OpenFiles() (*FileList, error) {
	f, err := os.Open(filepath.Join(i.Dir, FilesFile))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrCorrupt, FilesFile, err)
	}
	dec := json.NewDecoder(bufio.NewReaderSize(f, 64<<10))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		f.Close()
		return nil, fmt.Errorf("%w: parse %s: not a JSON array", ErrCorrupt, FilesFile)
	}
	return &FileList{f: f, dec: dec}, nil
}

// Next returns the next entry; ok is false after the last one (the array
// closed). Errors wrap ErrCorrupt.
func (l *FileList) Next() (f File, ok bool, err error) {
	if !l.dec.More() {
		if tok, err := l.dec.Token(); err != nil || tok != json.Delim(']') {
			return File{}, false, fmt.Errorf("%w: parse %s: array not closed", ErrCorrupt, FilesFile)
		}
		return File{}, false, nil
	}
	if err := l.dec.Decode(&f); err != nil {
		return File{}, false, fmt.Errorf("%w: parse %s: %w", ErrCorrupt, FilesFile, err)
	}
	return f, true, nil
}

// Close closes files.json.
func (l *FileList) Close() error { return l.f.Close() }

// walkCompare orders paths as Walk emits them (a directory, then its
// entries sorted by name, depth first): bytewise, with "/" below every
// other byte. Names hold no NUL, so "/" is mapped to it.
func walkCompare(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if ca == '/' {
			ca = 0
		}
		if cb == '/' {
			cb = 0
		}
		if ca < cb {
			return -1
		}
		return 1
	}
	return len(a) - len(b)
}

// errFound stops a walk at the first difference.
var errFound = errors.New("difference found")

// Verify walks rootfs (hashing every regular file) beside the recorded
// list, both in walk order, and describes the first difference in that
// order ("" when they agree), as Diff does: a path missing, of another
// type, size, content, target or mode, or one that was not installed.
// Memory does not grow with the number of files: neither list is held.
// A list out of walk order (not written by Walk) is reported as a
// difference.
func Verify(rootfs string, recorded *FileList) (string, error) {
	v := &verifier{list: recorded}
	if err := v.advance(); err != nil {
		return "", err
	}
	err := Walk(rootfs, nil, v.compare)
	if errors.Is(err, errFound) {
		return v.why, nil
	}
	if err != nil {
		return "", err
	}
	if v.hasNext {
		return fmt.Sprintf("%s is missing", v.next.Path), nil
	}
	return "", nil
}

type verifier struct {
	list     *FileList
	next     File // the recorded entry not yet matched
	hasNext  bool
	ahead    File // the one after it, read ahead for the order check
	hasAhead bool
	started  bool
	why      string
}

// advance moves to the next recorded entry, reading one more ahead and
// checking that the two are in walk order.
func (v *verifier) advance() error {
	if !v.started {
		v.started = true
		var err error
		if v.ahead, v.hasAhead, err = v.list.Next(); err != nil {
			return err
		}
	}
	v.next, v.hasNext = v.ahead, v.hasAhead
	if !v.hasNext {
		return nil
	}
	var err error
	if v.ahead, v.hasAhead, err = v.list.Next(); err != nil {
		return err
	}
	if v.hasAhead && walkCompare(v.next.Path, v.ahead.Path) >= 0 {
		return fmt.Errorf("%w: %s lists %s after %s, not in walk order", ErrCorrupt, FilesFile, v.ahead.Path, v.next.Path)
	}
	return nil
}

// compare matches one walked entry n against the recorded list.
func (v *verifier) compare(n File) error {
	if v.hasNext && walkCompare(v.next.Path, n.Path) < 0 {
		return v.found(fmt.Sprintf("%s is missing", v.next.Path))
	}
	if !v.hasNext || v.next.Path != n.Path {
		return v.found(fmt.Sprintf("%s was not installed", n.Path))
	}
	if d := differs(v.next, n); d != "" {
		return v.found(d)
	}
	return v.advance()
}

func (v *verifier) found(why string) error {
	v.why = why
	return errFound
}

// differs describes how n differs from the recorded r (same path), or "".
func differs(r, n File) string {
	switch {
	case n.Type != r.Type:
		return fmt.Sprintf("%s is a %s, want a %s", r.Path, n.Type, r.Type)
	case n.Size != r.Size:
		return fmt.Sprintf("%s has %d bytes, want %d", r.Path, n.Size, r.Size)
	case n.SHA256 != r.SHA256:
		return fmt.Sprintf("%s content differs (sha256 %.12s, want %.12s)", r.Path, n.SHA256, r.SHA256)
	case n.Target != r.Target:
		return fmt.Sprintf("%s points to %q, want %q", r.Path, n.Target, r.Target)
	case n.Mode != r.Mode:
		return fmt.Sprintf("%s has mode %04o, want %04o", r.Path, n.Mode, r.Mode)
	}
	return ""
}
