package installer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/release"
)

// archiveEntry is one tar entry a hostile archive adds or puts in place
// of the layout's entry of the same name.
type archiveEntry struct {
	hdr  tar.Header
	body []byte
}

// writeArchive writes the layout dir as the tar file like tarDir, with
// each entry named in replace written as given instead, and the entries
// of before and after added first and last. A "padding" entry with a nil
// body of a non-zero size is written as a hole (a sparse file on disk).
func writeArchive(t *testing.T, dir, file string, replace map[string]archiveEntry, before, after []archiveEntry) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	put := func(e archiveEntry) {
		if e.body == nil && e.hdr.Typeflag == tar.TypeReg && e.hdr.Size > 0 {
			// A hole: the header alone (written through its own writer, not
			// closed), then a seek past the body padded to its block, then a
			// new writer for what follows.
			var hb bytes.Buffer
			if err := tar.NewWriter(&hb).WriteHeader(&e.hdr); err != nil {
				t.Fatal(err)
			}
			if err := tw.Flush(); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(hb.Bytes()); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Seek((e.hdr.Size+511)/512*512, io.SeekCurrent); err != nil {
				t.Fatal(err)
			}
			tw = tar.NewWriter(f)
			return
		}
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range before {
		put(e)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		name, _ := filepath.Rel(dir, p)
		if e, ok := replace[name]; ok {
			e.hdr.Name = name
			put(e)
			return nil
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(st, "")
		if err != nil {
			return err
		}
		h.Name = name
		var b []byte
		if st.Mode().IsRegular() {
			if b, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		put(archiveEntry{hdr: *h, body: b})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range after {
		put(e)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// installWithin runs Install and fails the test when it has not returned
// within a minute (it hangs, as on a FIFO opened for reading).
func installWithin(t *testing.T, opts Options) (*Result, error) {
	t.Helper()
	type out struct {
		res *Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := Install(context.Background(), opts)
		done <- out{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-time.After(time.Minute):
		t.Fatalf("Install(From %q) still running after a minute: it hangs", opts.From)
		return nil, nil
	}
}

// TestInstallFromHostileLocalImage: an OCI archive or layout whose entries
// are not plain files (a FIFO, a device, a symlink or hardlink, a
// directory), whose names leave the archive, or that names a file twice is
// refused with one line naming the image, the entry and the rule, without
// hanging, with nothing activated, no scratch left and no bad blob kept.
func TestInstallFromHostileLocalImage(t *testing.T) {
	e := newLocalEnv(t)
	layer := e.reg.published(t, e.p, 1).Digest
	layerName := filepath.Join("blobs", "sha256", layer.Encoded())
	reg := func(name, body string) archiveEntry {
		return archiveEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body: []byte(body)}
	}
	special := func(typ byte, link string) map[string]archiveEntry {
		return map[string]archiveEntry{layerName: {hdr: tar.Header{Typeflag: typ, Mode: 0o644, Linkname: link, Devmajor: 1, Devminor: 5}}}
	}
	archive := func(replace map[string]archiveEntry, before, after []archiveEntry) func(t *testing.T) string {
		return func(t *testing.T) string {
			f := filepath.Join(t.TempDir(), "image.tar")
			writeArchive(t, e.layout, f, replace, before, after)
			return f
		}
	}
	layout := func(mut func(blob string)) func(t *testing.T) string {
		return func(t *testing.T) string {
			dir := filepath.Join(t.TempDir(), "layout")
			if err := os.CopyFS(dir, os.DirFS(e.layout)); err != nil {
				t.Fatal(err)
			}
			blob := filepath.Join(dir, layerName)
			os.Remove(blob)
			mut(blob)
			return dir
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		from  func(t *testing.T) string
		wants []string
	}{
		{"PATH a FIFO", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "image.tar")
			must(unix.Mkfifo(p, 0o644))
			return p
		}, []string{"neither a directory"}},
		{"archive: layer a FIFO", archive(special(tar.TypeFifo, ""), nil, nil), []string{layerName, "FIFO"}},
		{"archive: layer a character device", archive(special(tar.TypeChar, ""), nil, nil), []string{layerName, "device"}},
		{"archive: layer a symlink out", archive(special(tar.TypeSymlink, "/etc/shadow"), nil, nil), []string{layerName, "symlink"}},
		{"archive: layer a hardlink", archive(special(tar.TypeLink, "index.json"), nil, nil), []string{layerName, "hardlink"}},
		{"archive: entry leaves the archive", archive(nil, nil, []archiveEntry{reg("../escape", "x")}), []string{`"../escape"`, "leaves the archive"}},
		{"archive: absolute entry", archive(nil, nil, []archiveEntry{reg("/tmp/hbx-escape", "x")}), []string{`"/tmp/hbx-escape"`, "leaves the archive"}},
		// issue 25 item 4: every name was kept (1,000 one-MiB names, 1.19 GB).
		{"archive: a name longer than any a layout uses", archive(nil, []archiveEntry{reg("pad/"+strings.Repeat("n", 300), "")}, nil), []string{"a name of 304 bytes, longer than any an OCI layout uses (at most 256)"}},
		{"archive: a padding name twice", archive(nil, []archiveEntry{reg("pad/x", ""), reg("./pad/x", "")}, nil), []string{`"./pad/x"`, "more than once"}},
		{"archive: layer twice", archive(nil, nil, []archiveEntry{reg(layerName, "second")}), []string{layerName, "more than once"}},
		{"archive: index.json of 1 GiB", archive(map[string]archiveEntry{"index.json": {hdr: tar.Header{Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 30}}}, nil, nil),
			[]string{"index.json", "larger than"}},
		{"archive: index.json nested 100000 deep", archive(map[string]archiveEntry{"index.json": reg("", strings.Repeat("[", 100000)+strings.Repeat("]", 100000))}, nil, nil),
			[]string{"parse index.json", "max depth"}},
		{"archive: 70000 entries", func(t *testing.T) string {
			many := make([]archiveEntry, 70000)
			for i := range many {
				many[i] = reg(fmt.Sprintf("pad/%d", i), "")
			}
			return archive(nil, many, nil)(t)
		}, []string{"more than 65536 entries"}},
		{"layout: layer a FIFO", layout(func(b string) { must(unix.Mkfifo(b, 0o644)) }), []string{layerName, "FIFO"}},
		{"layout: layer a symlink to a FIFO inside", layout(func(b string) {
			must(unix.Mkfifo(filepath.Join(filepath.Dir(b), "fifo"), 0o644))
			must(os.Symlink("fifo", b))
		}), []string{layerName, "FIFO"}},
		{"layout: layer a symlink out", layout(func(b string) { must(os.Symlink("/etc/shadow", b)) }), []string{layerName}},
		{"layout: layer a symlink to /dev/zero", layout(func(b string) { must(os.Symlink("/dev/zero", b)) }), []string{layerName}},
		// The layer's own bytes, so only the link itself is wrong (issue
		// 25 item 7: it was read and hashed).
		{"layout: layer a hard link to a file outside", layout(func(b string) { must(os.Link(filepath.Join(e.layout, layerName), b)) }), []string{layerName, "hard link"}},
		{"layout: layer a directory", layout(func(b string) { must(os.Mkdir(b, 0o755)) }), []string{layerName}},
		{"layout: index.json a FIFO", func(t *testing.T) string {
			dir := layout(func(b string) { must(os.Link(filepath.Join(e.layout, layerName), b)) })(t)
			os.Remove(filepath.Join(dir, "index.json"))
			must(unix.Mkfifo(filepath.Join(dir, "index.json"), 0o644))
			return dir
		}, []string{"index.json", "FIFO"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from := tt.from(t)
			rt := filepath.Join(t.TempDir(), "runtime")
			_, err := installWithin(t, e.opts(e.p, func(o *Options) {
				o.RuntimeDir, o.From, o.KeepBlobs, o.Registry = rt, from, true, RegistryOptions{}
			}))
			if err == nil {
				t.Fatalf("Install(From %s) succeeded, want a refusal", from)
			}
			msg := err.Error()
			t.Log(msg)
			if !errors.Is(err, ErrLocalImage) && !errors.Is(err, ErrDigestMismatch) {
				t.Errorf("Install(From) = %v, want ErrLocalImage or ErrDigestMismatch", err)
			}
			for _, w := range append(tt.wants, from) {
				if !strings.Contains(msg, w) {
					t.Errorf("Install(From) = %q, want it to name %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("Install(From) = %q, want one line", msg)
			}
			if currentTarget(t, rt) != "" {
				t.Errorf("a refused local image was activated")
			}
			if bad, err := (blobCache{dir: filepath.Join(rt, release.BlobsDir)}).verifyAll(); err != nil || len(bad) > 0 {
				t.Errorf("store after a refusal: blobs failing their digest %v, %v", bad, err)
			}
			if _, err := os.Lstat(filepath.Join(rt, release.ScratchDir)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("refusal left %s: %v", release.ScratchDir, err)
			}
			if _, err := os.Lstat("/tmp/hbx-escape"); err == nil {
				os.Remove("/tmp/hbx-escape")
				t.Errorf("an absolute entry was written outside")
			}
		})
	}
}

// TestInstallFromArchiveUsesNoScratch: an OCI archive is read in place,
// never unpacked: an archive padded with 400 MiB of unrelated bytes (a
// hole on disk) installs into a runtime directory on a 300 MiB filesystem,
// and unrelated entries that are not files (a FIFO, a symlink) outside the
// layout's names are ignored.
func TestInstallFromArchiveUsesNoScratch(t *testing.T) {
	e := newLocalEnv(t)
	rt := filepath.Join(testenv.Tmpfs(t, "300m"), "runtime")
	padding := archiveEntry{hdr: tar.Header{Name: "padding", Typeflag: tar.TypeReg, Mode: 0o644, Size: 400 << 20}}
	f := filepath.Join(t.TempDir(), "image.tar")
	writeArchive(t, e.layout, f, nil, []archiveEntry{padding}, []archiveEntry{
		{hdr: tar.Header{Name: "extra/fifo", Typeflag: tar.TypeFifo, Mode: 0o644}},
		{hdr: tar.Header{Name: "extra/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}},
	})
	res, err := installWithin(t, e.opts(e.p, func(o *Options) {
		o.RuntimeDir, o.From, o.KeepBlobs, o.Registry = rt, f, true, RegistryOptions{}
	}))
	if err != nil || !res.Changed {
		t.Fatalf("Install(From a padded archive) = %+v, %v; want it installed", res, err)
	}
	if got := res.Release.Meta.IndexDigest; got != e.p.index {
		t.Errorf("installed index %s, want %s", got, e.p.index)
	}
}

// TestStoreEntriesNotRegular: a kept blob replaced by a FIFO, a symlink
// (to a FIFO, to /dev/zero, to a file outside) or a directory is taken for
// a damaged blob: install --verify removes it and fetches it again, and an
// upgrade that reuses it fetches it again, neither blocking nor reading
// through the link.
func TestStoreEntriesNotRegular(t *testing.T) {
	e := newEnv(t)
	p1 := e.reg.publish(t, "executor", goodParts(hostPlat))
	if _, err := Install(context.Background(), e.opts(p1, func(o *Options) { o.KeepBlobs = true })); err != nil {
		t.Fatal(err)
	}
	app := e.reg.published(t, p1, 1).Digest
	blob := filepath.Join(e.runtime, release.BlobsDir, "sha256", app.Encoded())
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	replace := map[string]func() error{
		"FIFO":              func() error { return unix.Mkfifo(blob, 0o600) },
		"symlink to a FIFO": func() error { unix.Mkfifo(blob+".fifo", 0o600); return os.Symlink(blob+".fifo", blob) },
		"symlink /dev/zero": func() error { return os.Symlink("/dev/zero", blob) },
		"symlink outside":   func() error { return os.Symlink(outside, blob) },
		"hardlink outside":  func() error { return os.Link(outside, blob) },
		"empty directory":   func() error { return os.Mkdir(blob, 0o700) },
	}
	for name, mk := range replace {
		for _, verify := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/verify=%v", name, verify), func(t *testing.T) {
				os.Remove(blob)
				os.Remove(blob + ".fifo")
				if err := mk(); err != nil {
					t.Fatal(err)
				}
				opts := e.opts(p1, func(o *Options) { o.KeepBlobs, o.Verify = true, true })
				if !verify { // a cold install of the same image into a fresh tree reusing the store
					// (no release left, or the install would reuse it in place)
					os.RemoveAll(filepath.Join(e.runtime, "current"))
					os.RemoveAll(filepath.Join(e.runtime, release.ReleasesDir))
					opts.Verify = false
				}
				if _, err := installWithin(t, opts); err != nil {
					t.Fatalf("Install(Verify %v) over a kept blob that is a %s = %v, want it fetched again", verify, name, err)
				}
				st, err := os.Lstat(blob)
				if err != nil || !st.Mode().IsRegular() {
					t.Fatalf("kept blob after Install = %v, %v; want a regular file", st, err)
				}
				if b, _ := os.ReadFile(outside); string(b) != "secret" {
					t.Errorf("the file outside the store was changed: %q", b)
				}
				if bad, err := (blobCache{dir: filepath.Join(e.runtime, release.BlobsDir)}).verifyAll(); err != nil || len(bad) != 0 {
					t.Errorf("store after the repair: bad %v, err %v", bad, err)
				}
			})
		}
	}
}
