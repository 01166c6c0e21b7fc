// SPDX-License-Identifier: Apache-2.0

// Command backupdata writes a synthetic Executor data directory for
// scripts/backupbench.sh: about SIZE bytes across about FILES files, shaped
// like what a long-lived box accumulates.
//
//	backupdata -dir DIR [-size 1GiB-in-bytes] [-files 10000] [-seed 1]
//
// A quarter of the bytes is one database file (db/executor.sqlite: 4 KiB
// pages of JSON-like rows with random ids, which compress about 3x), an
// eighth its WAL; the rest are files of 1 KiB to 512 KiB in nested
// directories, half of them random (keys, encrypted blobs, uploads that do
// not compress) and half JSON text. The output is deterministic for a seed.
// DIR must not exist.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

func main() {
	dir := flag.String("dir", "", "directory to create")
	size := flag.Int64("size", 1<<30, "total bytes")
	files := flag.Int("files", 10000, "number of files")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	if *dir == "" || *files < 3 || *size < 1<<20 {
		fmt.Fprintln(os.Stderr, "usage: backupdata -dir DIR [-size BYTES] [-files N] [-seed N]")
		os.Exit(2)
	}
	if err := run(*dir, *size, *files, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "backupdata:", err)
		os.Exit(1)
	}
}

func run(dir string, size int64, files int, seed uint64) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	if err := writeFile(filepath.Join(dir, "db/executor.sqlite"), size/4, r, pages); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "db/executor.sqlite-wal"), size/8, r, pages); err != nil {
		return err
	}
	rest := size - size/4 - size/8
	n := files - 2
	avg := rest / int64(n)
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("blobs/%02x/%02x", i%64, (i/64)%16))
		// Sizes spread around the average, 1/8x to about 2x.
		sz := max(1024, avg/8+r.Int64N(avg*15/8+1))
		kind := text
		if i%2 == 0 {
			kind = random
		}
		if err := writeFile(filepath.Join(sub, fmt.Sprintf("obj-%05d", i)), sz, r, kind); err != nil {
			return err
		}
	}
	return nil
}

// content kinds
const (
	random = iota
	text
	pages
)

func writeFile(p string, n int64, r *rand.Rand, kind int) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	buf := make([]byte, 4096)
	for left := n; left > 0; left -= int64(len(buf)) {
		switch kind {
		case random:
			for i := 0; i < len(buf); i += 8 {
				v := r.Uint64()
				for j := range 8 {
					buf[i+j] = byte(v >> (8 * j))
				}
			}
		case text, pages:
			buf = buf[:0]
			for len(buf) < 4096 {
				buf = fmt.Appendf(buf, `{"id":"%016x","user":%d,"scope":"mail.read","ok":true}`+"\n", r.Uint64(), r.IntN(50))
			}
			buf = buf[:4096]
		}
		if left < int64(len(buf)) {
			buf = buf[:left]
		}
		if _, err := w.Write(buf); err != nil {
			f.Close()
			return err
		}
		buf = buf[:cap(buf)]
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
