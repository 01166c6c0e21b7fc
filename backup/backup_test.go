package backup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// richTree is a data directory with every kind of entry backups keep.
func richTree(t *testing.T, dir string) {
	t.Helper()
	requireXattrs(t, dir)
	write(t, dir,
		"db/ 0750",
		"db/main.sqlite bytes 300000 1",
		"db/main.sqlite-wal bytes 70000 2",
		"keys/ 0700",
		"keys/master.key 0600 s3cr3t\x00\xff binary",
		"keys/master.key xattr user.hbx.kind=key",
		"keys/link-to-master == keys/master.key",
		"keys/ xattr user.hbx.dir=yes",
		"empty/ 0755",
		"deep/a/b/c/ 0700",
		"deep/a/b/c/d 0644 deep",
		"rel => keys/master.key",
		"abs => /etc/hostname",
		"dangling => nowhere/at/all",
		".wh.literal 0644 not a whiteout",
		"hbx-backup.json 0644 a data file named like the manifest",
		"sticky/ 1777",
		"exec 0755 #!/bin/sh",
		"db/main.sqlite mtime 2021-02-03T04:05:06.123456789Z",
		"rel mtime 2020-01-01T00:00:00.5Z",
	)
	if os.Geteuid() == 0 {
		write(t, dir, "db/main.sqlite owner 1234:5678", "rel owner 4321:8765", "empty/ owner 1000:1000")
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Options)
		// plain: not authenticated, so every entry gets the restore's
		// owner, not the archive's.
		plain bool
	}{
		{"gzip+gpg", nil, false},
		{"zstd+gpg", func(o *Options) { o.Compression = Zstd }, false},
		{"gzip plain", func(o *Options) { o.Encrypt = false }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t)
			richTree(t, b.data)
			if tc.plain {
				// Not authenticated: no symlink out of the data directory.
				must(t, os.Remove(filepath.Join(b.data, "abs")))
			}
			want := snapshot(t, b.data)
			if tc.plain {
				want = ownedBy(want, b.restoreOptions("").Owner)
			}
			res := b.backup(tc.mod)
			if st, err := os.Stat(res.Path); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("archive %s: %v, mode %v; want 0600", res.Path, err, st.Mode())
			}
			if st, _ := os.Stat(b.backups); st.Mode().Perm() != 0o700 {
				t.Errorf("backup dir mode %v, want 0700", st.Mode().Perm())
			}
			// Change everything, then restore.
			write(t, b.data, "db/main.sqlite 0600 overwritten", "new 0644 new file")
			os.RemoveAll(filepath.Join(b.data, "keys"))
			rr, err := Restore(context.Background(), b.restoreOptions(res.Path))
			if err != nil {
				t.Fatalf("Restore() = %v", err)
			}
			got := snapshot(t, b.data)
			if diff := cmp.Diff(withoutRoot(got), withoutRoot(want)); diff != "" {
				t.Errorf("restored tree (-got +want):\n%s", diff)
			}
			if st, _ := os.Stat(b.data); st.Mode().Perm() != 0o700 {
				t.Errorf("restored data dir mode %v, want 0700", st.Mode().Perm())
			}
			old := rr.Restored[b.data]
			if _, err := os.Stat(filepath.Join(old, "new")); err != nil {
				t.Errorf("pre-restore copy %q lacks the file written before the restore: %v", old, err)
			}
			if _, err := os.Stat(journalPath(b.data)); !os.IsNotExist(err) {
				t.Errorf("journal left behind: %v", err)
			}
		})
	}
}

// ownedBy returns snapshot lines with every owner replaced by o.
func ownedBy(lines []string, o Owner) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		f := strings.SplitN(l, " ", 4)
		f[2] = fmt.Sprintf("%d:%d", o.UID, o.GID)
		out[i] = strings.Join(f, " ")
	}
	return out
}
