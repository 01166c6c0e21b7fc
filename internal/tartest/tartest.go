// Package tartest builds tar streams, benign and malicious, for tests of the
// layer applier and of backup restore (after containerd's tartest).
//
// A Builder never validates what it is told: it writes exactly the headers
// given, which is the point.
package tartest

import (
	"archive/tar"
	"bytes"
	"time"
)

// Epoch is the mtime given to entries that do not set one.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Builder accumulates tar entries in memory. Methods return the Builder so
// layers read as one expression. Write errors panic: the input is the test's
// own and an error means the test itself is wrong.
type Builder struct {
	buf bytes.Buffer
	tw  *tar.Writer
}

// New returns an empty Builder.
func New() *Builder {
	b := &Builder{}
	b.tw = tar.NewWriter(&b.buf)
	return b
}

// Header writes hdr followed by body (hdr.Size is set to len(body) for
// regular files when left at 0).
func (b *Builder) Header(hdr *tar.Header, body []byte) *Builder {
	if hdr.ModTime.IsZero() {
		hdr.ModTime = Epoch
	}
	if hdr.Format == tar.FormatUnknown {
		hdr.Format = tar.FormatPAX
	}
	if (hdr.Typeflag == tar.TypeReg) && hdr.Size == 0 {
		hdr.Size = int64(len(body))
	}
	if err := b.tw.WriteHeader(hdr); err != nil {
		panic(err)
	}
	if len(body) > 0 {
		if _, err := b.tw.Write(body); err != nil {
			panic(err)
		}
	}
	return b
}

// Dir adds a directory.
func (b *Builder) Dir(name string, mode int64) *Builder {
	return b.Header(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}, nil)
}

// File adds a regular file.
func (b *Builder) File(name, content string, mode int64) *Builder {
	return b.Header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode}, []byte(content))
}

// Symlink adds a symlink name -> target.
func (b *Builder) Symlink(name, target string) *Builder {
	return b.Header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, nil)
}

// Link adds a hardlink name -> target.
func (b *Builder) Link(name, target string) *Builder {
	return b.Header(&tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644}, nil)
}

// Whiteout adds the whiteout file for name (dir/.wh.base).
func (b *Builder) Whiteout(dir, base string) *Builder {
	n := ".wh." + base
	if dir != "" {
		n = dir + "/" + n
	}
	return b.File(n, "", 0o644)
}

// Opaque adds the opaque whiteout marker of dir.
func (b *Builder) Opaque(dir string) *Builder {
	n := ".wh..wh..opq"
	if dir != "" {
		n = dir + "/" + n
	}
	return b.File(n, "", 0o644)
}

// Bytes closes the archive and returns it. The Builder is done after.
func (b *Builder) Bytes() []byte {
	if err := b.tw.Close(); err != nil {
		panic(err)
	}
	return b.buf.Bytes()
}

// Truncated returns what was written so far without closing the archive:
// a stream that ends mid-entry, or whose last header claims a body it lacks.
func (b *Builder) Truncated() []byte {
	return append([]byte(nil), b.buf.Bytes()...)
}
