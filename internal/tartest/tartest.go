// Package tartest builds tar streams, benign and malicious, for tests of the
// layer applier and of backup restore (after containerd's tartest), and
// holds the project's one test filesystem DSL, that of Go's
// os/root_test.go ("d/ 0755", "f 0644 content", "l => target"): Write lays
// a tree out from it, Tree and Shape describe a tree in it.
//
// A Builder never validates what it is told: it writes exactly the headers
// given, which is the point.
package tartest

import (
	"archive/tar"
	"bytes"
	"fmt"
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

// Raw builds one entry by hand: a PAX extended header carrying records
// (written verbatim, even ones archive/tar refuses to write, such as
// GNU.sparse.*), then a ustar header for name with typeflag and size
// len(body), then body padded to 512 bytes. Append End() to finish an
// archive.
func Raw(name string, typeflag byte, records [][2]string, body []byte) []byte {
	var out []byte
	if len(records) > 0 {
		var pax []byte
		for _, kv := range records {
			rec := " " + kv[0] + "=" + kv[1] + "\n"
			n := len(rec)
			for {
				l := len(fmt.Sprint(n)) + len(rec)
				if l == n {
					break
				}
				n = l
			}
			pax = append(pax, fmt.Sprint(n)+rec...)
		}
		out = append(out, rawHeader("PaxHeaders/"+name, tar.TypeXHeader, int64(len(pax)))...)
		out = append(out, pad(pax)...)
	}
	out = append(out, rawHeader(name, typeflag, int64(len(body)))...)
	return append(out, pad(body)...)
}

// End is the two zero blocks that end an archive.
func End() []byte { return make([]byte, 1024) }

func pad(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

func rawHeader(name string, typeflag byte, size int64) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	copy(h[100:108], fmt.Sprintf("%07o\x00", 0o644))
	copy(h[108:116], "0000000\x00")
	copy(h[116:124], "0000000\x00")
	copy(h[124:136], fmt.Sprintf("%011o\x00", size))
	copy(h[136:148], fmt.Sprintf("%011o\x00", Epoch.Unix()))
	h[156] = typeflag
	copy(h[257:263], "ustar\x00")
	copy(h[263:265], "00")
	for i := 148; i < 156; i++ {
		h[i] = ' '
	}
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}
