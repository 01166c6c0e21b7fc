// SPDX-License-Identifier: Apache-2.0

package regfile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	link := filepath.Join(dir, "link")
	if err := os.Symlink("reg", link); err != nil {
		t.Fatal(err)
	}
	fifoLink := filepath.Join(dir, "fifolink")
	if err := os.Symlink("fifo", fifoLink); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		want     string // content, or the error's substring
		notReg   bool
		notExist bool
	}{
		{reg, "hello\n", false, false},
		{link, "hello\n", false, false},
		{fifo, "is a FIFO", true, false},
		{fifoLink, "is a FIFO", true, false},
		{sock, "is a socket or device", true, false}, // open(2) of a socket fails with ENXIO
		{dir, "is a directory", true, false},
		{"/dev/null", "is a character device", true, false},
		{filepath.Join(dir, "missing"), "", false, true},
	}
	for _, tt := range tests {
		done := make(chan struct{})
		var b []byte
		var err error
		go func() {
			b, err = ReadFile(tt.path, 0)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("ReadFile(%s) blocked", tt.path)
		}
		switch {
		case tt.notReg:
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("ReadFile(%s) = %v, want ErrNotRegular %q naming the path", tt.path, err, tt.want)
			}
			if nr, ok := errors.AsType[*NotRegularError](err); !ok || nr.Path != tt.path || "is "+nr.What != tt.want {
				t.Errorf("ReadFile(%s) = %#v, want a *NotRegularError for the path, %q", tt.path, err, tt.want)
			}
		case tt.notExist:
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("ReadFile(%s) = %v, want fs.ErrNotExist", tt.path, err)
			}
		default:
			if err != nil || string(b) != tt.want {
				t.Errorf("ReadFile(%s) = %q, %v, want %q", tt.path, b, err, tt.want)
			}
		}
	}
}

func TestReadFileLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(p, 5); err != nil || string(b) != "12345" {
		t.Errorf("ReadFile(limit 5) = %q, %v, want 12345", b, err)
	}
	if _, err := ReadFile(p, 4); err == nil || !strings.Contains(err.Error(), "larger than 4 bytes") {
		t.Errorf("ReadFile(limit 4) = %v, want larger than 4 bytes", err)
	}
}

func TestOpenBlocking(t *testing.T) {
	// The returned descriptor reads like one of os.Open: not non-blocking.
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if flags&unix.O_NONBLOCK != 0 {
		t.Errorf("Open(%s) descriptor flags %#x, want O_NONBLOCK cleared", p, flags)
	}
}
