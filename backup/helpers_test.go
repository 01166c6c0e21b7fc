package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
)

// testPass is the passphrase of the tests' archives.
var testPass = []byte("correct horse battery staple")

func passFunc(p []byte) PassphraseFunc { return func() ([]byte, error) { return p, nil } }

// box is one test machine: a data directory and hbx's directories.
type box struct {
	t                                   *testing.T
	root                                string
	data, runtime, state, backups, pass string
}

func newBox(t *testing.T) *box {
	t.Helper()
	root := t.TempDir()
	b := &box{t: t, root: root, data: filepath.Join(root, "workspace/executor/data"), runtime: filepath.Join(root, "storage/runtime"),
		state: filepath.Join(root, "var/lib/hbx"), backups: filepath.Join(root, "workspace/backups")}
	for _, d := range []string{b.data, b.runtime, b.state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func (b *box) options() Options {
	return Options{DataDir: b.data, RuntimeDir: b.runtime, StateDir: b.state, Dir: b.backups, Name: "executor",
		Encrypt: true, Passphrase: testPass, Image: "127.0.0.1:5000/x:v1@sha256:" + strings.Repeat("a", 64), Platform: "linux/amd64", HbxVersion: "test"}
}

func (b *box) restoreOptions(archive string) RestoreOptions {
	return RestoreOptions{Archive: archive, Passphrase: passFunc(testPass), DataDir: b.data, RuntimeDir: b.runtime, StateDir: b.state,
		BackupDir: b.backups, Owner: Owner{os.Getuid(), os.Getgid()}, KeepPreRestore: 2, HealthWait: 5 * time.Second}
}

func (b *box) backup(mod func(*Options)) *Result {
	b.t.Helper()
	o := b.options()
	if mod != nil {
		mod(&o)
	}
	res, err := Create(context.Background(), o)
	if err != nil {
		b.t.Fatalf("Create() = %v", err)
	}
	return res
}

// write is tartest.Write, the project's test filesystem DSL ("d/ 0750",
// "f 0640 content", "l => target", "h == f", "f xattr user.k=v",
// "f owner 1000:1000", "f mtime ...", "f bytes N seed").
func write(t *testing.T, dir string, lines ...string) { tartest.Write(t, dir, lines...) }

// pseudoRandom is tartest.PseudoRandom: n bytes that do not compress.
func pseudoRandom(n, seed int) []byte { return tartest.PseudoRandom(n, seed) }

// snapshot describes every entry of dir, itself included: type, mode,
// owner, mtime (ns), size and sha256 or link target, hardlink group and
// xattrs. Directory mtimes are left out when skipDirTimes (reading a tree
// changes none, but writing a file into one does).
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	inodes := map[uint64]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s %06o %d:%d %d", rel, st.Mode, st.Uid, st.Gid, time.Unix(st.Mtim.Unix()).UnixNano())
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += fmt.Sprintf(" %d %s", len(b), hex.EncodeToString(sum[:8]))
			if st.Nlink > 1 {
				if first, ok := inodes[st.Ino]; ok {
					line += " link=" + first
				} else {
					inodes[st.Ino] = rel
				}
			}
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			x := xattrsOf(t, p)
			if x != "" {
				line += " xattrs=" + x
			}
		}
		if rel == "." {
			line = "." + line[1:]
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", dir, err)
	}
	sort.Strings(out)
	return out
}

func xattrsOf(t *testing.T, p string) string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return ""
	}
	var kv []string
	for _, k := range splitNul(buf[:n]) {
		v := make([]byte, 4096)
		m, err := unix.Lgetxattr(p, k, v)
		if err == nil {
			kv = append(kv, k+"="+string(v[:m]))
		}
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// withoutRoot drops the line of the tree's root (its mode and owner are
// set by restore, not kept).
func withoutRoot(lines []string) []string {
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(l, ". ") {
			out = append(out, l)
		}
	}
	return out
}

// requireXattrs skips unless dir's filesystem stores user xattrs.
func requireXattrs(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, ".xattr-probe")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(p)
	if err := unix.Setxattr(p, "user.probe", []byte("1"), 0); err != nil {
		testenv.Missing(t, fmt.Sprintf("the test filesystem does not store user xattrs: %v", err))
	}
}

func isErr(err, target error) bool { return errors.Is(err, target) }
