package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Scan lists the tree under rootfs in lexical order, through an os.Root so
// nothing outside it is read. hashOf, when not nil, supplies the sha256 of
// a regular file by inode number (hashes taken while the file was written);
// files it does not know, or all files when hashOf is nil, are read and
// hashed.
func Scan(rootfs string, hashOf func(ino uint64) (string, bool)) ([]File, error) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, fmt.Errorf("open rootfs: %w", err)
	}
	defer root.Close()
	var out []File
	buf := make([]byte, 1<<20)
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := File{Path: p, Mode: uint32(info.Mode().Perm())}
		if info.Mode()&fs.ModeSticky != 0 {
			f.Mode |= 0o1000
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			f.Type = "symlink"
			if f.Target, err = root.Readlink(p); err != nil {
				return err
			}
			f.Mode = 0
		case info.IsDir():
			f.Type = "dir"
		case info.Mode().IsRegular():
			f.Type = "file"
			f.Size = info.Size()
			var ok bool
			if hashOf != nil {
				if st, isStat := info.Sys().(*syscall.Stat_t); isStat {
					f.SHA256, ok = hashOf(st.Ino)
				}
			}
			if !ok {
				if f.SHA256, err = hashFile(root, p, buf); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("%s: unexpected file type %v", p, info.Mode().Type())
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan rootfs: %w", err)
	}
	return out, nil
}

func hashFile(root *os.Root, p string, buf []byte) (string, error) {
	f, err := root.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Diff compares a recorded file list with a fresh Scan and describes the
// first difference, or returns "" when they agree.
func Diff(recorded, now []File) string {
	byPath := make(map[string]File, len(now))
	for _, f := range now {
		byPath[f.Path] = f
	}
	for _, r := range recorded {
		n, ok := byPath[r.Path]
		switch {
		case !ok:
			return fmt.Sprintf("%s is missing", r.Path)
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
		delete(byPath, r.Path)
	}
	for p := range byPath {
		return fmt.Sprintf("%s was not installed", p)
	}
	return ""
}
