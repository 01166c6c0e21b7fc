package fsat

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Dirent is one directory entry as getdents64 gives it: its name, inode
// number and type as S_IFMT bits (0 when the file system does not say,
// or for a type other than a directory, regular file or symlink).
type Dirent struct {
	Name string
	Ino  uint64
	Mode uint32
}

// direntsBuf is the getdents64 buffer (bytes): a few hundred entries a
// call. Buffers are pooled: a walk lists thousands of directories.
const direntsBuf = 16 << 10

var direntsBufs = sync.Pool{New: func() any { b := make([]byte, direntsBuf); return &b }}

// ReadDirents lists the directory open as fd from the descriptor's
// position (a fresh one's is the start; one already listed gives nothing
// more), "." and ".." left out, in the order the file system gives, with
// getdents64, on the bare descriptor: no *os.File, whose NewFile costs an fcntl, for walks
// over thousands of directories.
func ReadDirents(fd int) ([]Dirent, error) {
	var out []Dirent
	err := readDir(fd, func(name string, ino uint64, typ byte) {
		out = append(out, Dirent{Name: name, Ino: ino, Mode: direntMode(typ)})
	})
	return out, err
}

// ReadDirNames is ReadDirents with the names alone: 16 bytes and the name
// an entry, for a walk that lstats each entry anyway.
func ReadDirNames(fd int) ([]string, error) {
	var out []string
	err := readDir(fd, func(name string, _ uint64, _ byte) { out = append(out, name) })
	return out, err
}

// readDir calls each with every entry of the directory open as fd, from
// the descriptor's position ("." and ".." left out), as getdents64 gives them (struct
// linux_dirent64: d_ino u64, d_off s64, d_reclen u16, d_type u8, d_name
// NUL-terminated).
func readDir(fd int, each func(name string, ino uint64, typ byte)) error {
	bp := direntsBufs.Get().(*[]byte)
	defer direntsBufs.Put(bp)
	buf := *bp
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return fmt.Errorf("getdents: bad record length %d", reclen)
			}
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				each(s, binary.NativeEndian.Uint64(buf[off:]), buf[off+18])
			}
			off += reclen
		}
	}
}

// direntMode maps a d_type to S_IFMT bits; 0 for DT_UNKNOWN and the
// types not mapped.
func direntMode(t byte) uint32 {
	switch t {
	case unix.DT_DIR:
		return unix.S_IFDIR
	case unix.DT_REG:
		return unix.S_IFREG
	case unix.DT_LNK:
		return unix.S_IFLNK
	}
	return 0
}
