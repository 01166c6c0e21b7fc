// SPDX-License-Identifier: Apache-2.0

package testimage

import (
	"archive/tar"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Epoch is the modification time of every tar entry and the creation time
// recorded in every image config: 2026-01-01T00:00:00Z.
var Epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// entry is one member of a layer tar. Paths are slash-separated and relative;
// directories end in "/".
type entry struct {
	path     string
	typ      byte   // tar.TypeDir, tar.TypeReg, tar.TypeSymlink or tar.TypeLink
	mode     int64  // permission bits, with sticky/setuid bits when needed
	uid, gid int    // numeric owner; names are never written
	data     []byte // contents of a small regular file
	link     string // symlink target, or the path a hard link points to
	// big, when set, supplies the contents of a regular file too large to
	// hold in memory, and its size.
	big func() (io.ReadCloser, int64, error)
}

func dir(path string, mode int64) entry {
	return entry{path: path, typ: tar.TypeDir, mode: mode}
}

func file(path string, mode int64, data string) entry {
	return entry{path: path, typ: tar.TypeReg, mode: mode, data: []byte(data)}
}

func symlink(path, target string) entry {
	return entry{path: path, typ: tar.TypeSymlink, mode: 0o777, link: target}
}

func hardlink(path, target string) entry {
	return entry{path: path, typ: tar.TypeLink, mode: 0o644, link: target}
}

// writeTar writes entries to w as one tar stream (PAX format, ending with the
// two zero blocks), sorted by path so that parents precede their children.
// A hard link must point at a regular file written before it.
func writeTar(w io.Writer, entries []entry) error {
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b entry) int { return cmp.Compare(a.path, b.path) })
	tw := tar.NewWriter(w)
	written := make(map[string]byte, len(sorted))
	for _, e := range sorted {
		if err := writeEntry(tw, e, written); err != nil {
			return fmt.Errorf("entry %q: %w", e.path, err)
		}
		written[e.path] = e.typ
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("close tar: %w", err)
	}
	return nil
}

func writeEntry(tw *tar.Writer, e entry, written map[string]byte) error {
	if _, dup := written[e.path]; dup {
		return errors.New("duplicate path")
	}
	if (e.typ == tar.TypeDir) != strings.HasSuffix(e.path, "/") {
		return errors.New("directory paths, and only they, must end in a slash")
	}
	hdr := &tar.Header{
		Typeflag: e.typ,
		Name:     e.path,
		Linkname: e.link,
		Mode:     e.mode,
		Uid:      e.uid,
		Gid:      e.gid,
		ModTime:  Epoch,
		Format:   tar.FormatPAX,
	}
	switch e.typ {
	case tar.TypeLink:
		if written[e.link] != tar.TypeReg {
			return fmt.Errorf("hard link target %q is not an earlier regular file", e.link)
		}
	case tar.TypeReg:
		if e.big != nil {
			rc, size, err := e.big()
			if err != nil {
				return err
			}
			hdr.Size = size
			err = writeBig(tw, hdr, rc)
			if cerr := rc.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("close source: %w", cerr)
			}
			return err
		}
		hdr.Size = int64(len(e.data))
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	if _, err := tw.Write(e.data); err != nil {
		return fmt.Errorf("write contents: %w", err)
	}
	return nil
}

func writeBig(tw *tar.Writer, hdr *tar.Header, r io.Reader) error {
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	n, err := io.Copy(tw, r)
	if err != nil {
		return fmt.Errorf("write contents: %w", err)
	}
	if n != hdr.Size {
		return fmt.Errorf("wrote %d bytes, want %d", n, hdr.Size)
	}
	return nil
}
