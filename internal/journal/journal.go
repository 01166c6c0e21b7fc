package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/regfile"
)

// MaxBytes is the largest journal Read reads.
const MaxBytes = 1 << 20

// ErrFormat: a journal records a format this hbx does not read.
var ErrFormat = errors.New("unknown journal format")

// Header is the part of every journal Read checks: embed it first in the
// journal's struct so "format" is its first key. A zero Header encodes
// no key (as journals from before the key); Write always sets it.
type Header struct {
	Format int `json:"format,omitempty"`
}

// SetFormat sets the format Write records.
func (h *Header) SetFormat(n int) { h.Format = n }

// Versioned is a journal: a struct embedding Header.
type Versioned interface {
	SetFormat(n int)
}

// File is one journal file.
type File struct {
	// Path is where the journal is stored.
	Path string
	// What names the journal in errors: "restore journal".
	What string
	// Format is the version this hbx writes and reads (1 and up).
	Format int
	// Unversioned reads a journal without a format key as Format.
	Unversioned bool
	// Fix ends the error for a journal that does not parse: what the
	// operator does ("move it away once the data directory is checked
	// by hand").
	Fix string
}

// Write records v (with its format set to f.Format) durably at f.Path,
// mode 0600, as indented JSON ending in a newline.
func (f File) Write(v Versioned) error {
	v.SetFormat(f.Format)
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", f.What, err)
	}
	if err := atomicfile.WriteFile(f.Path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", f.What, err)
	}
	return nil
}

// Read decodes the journal at f.Path into v and reports whether there was
// one (false, nil when the file does not exist). It fails when the file
// cannot be read, does not parse, or records another format (wrapping
// ErrFormat).
func (f File) Read(v Versioned) (bool, error) {
	// hbx writes journals by rename: a symlink, FIFO or device at the path
	// is not one (refused without blocking), nor is a file over MaxBytes.
	b, err := regfile.ReadFileNoFollow(f.Path, MaxBytes)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", f.What, err)
	}
	// The format first: a journal of another format may not decode into
	// v at all, and its error is the one that says what to do.
	var h struct {
		Format *int `json:"format"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return false, fmt.Errorf("%s %s does not parse (%w); %s", f.What, f.Path, err, f.Fix)
	}
	got := 0
	switch {
	case h.Format != nil:
		got = *h.Format
	case f.Unversioned:
		got = f.Format
	}
	if got != f.Format {
		return false, &formatError{f: f, got: got}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%s %s does not parse (%w); %s", f.What, f.Path, err, f.Fix)
	}
	v.SetFormat(got)
	return true, nil
}

// formatError is a journal of another format than the one this hbx reads.
type formatError struct {
	f   File
	got int
}

func (e *formatError) Error() string {
	return fmt.Sprintf("%s %s has format %d, this hbx reads %d; finish it with the hbx that wrote it", e.f.What, e.f.Path, e.got, e.f.Format)
}

func (e *formatError) Unwrap() error { return ErrFormat }
