package installer

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/release"
)

// errTopRefused: a top layer the applier refused (fuzzed layers only).
var errTopRefused = errors.New("top layer refused")

// stageOver makes a layer state of base (its rootfs applied as an
// install applies it, its files.json written by a walk), stages a
// release from it as an upgrade does (linkFrom: hard links, the state's
// hashes, tracking on; limit > 0 replaces the tracking limit), applies
// top, and returns the release's files.json as writeFiles writes it and
// as a walk of the whole tree reading every file writes it, with how
// many entries writeFiles took from the state's list. An error wraps
// errTopRefused when a top layer was refused.
func stageOver(t *testing.T, base, top [][]byte, limit int) (derived, walked string, kept int, err error) {
	t.Helper()
	dir := t.TempDir()
	state, staged := filepath.Join(dir, "state"), filepath.Join(dir, "staged")
	for _, d := range []string{state, staged} {
		if err := os.MkdirAll(filepath.Join(d, release.RootfsDir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := func(spill string) extract.Options {
		return extract.Options{RuntimeModes: true, HashFiles: true, SpillDir: spill}
	}
	a, err := extract.New(filepath.Join(state, release.RootfsDir), opts(state))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i, l := range base {
		if err := a.Apply(bytes.NewReader(l)); err != nil {
			return "", "", 0, fmt.Errorf("base layer %d: %w", i, err)
		}
	}
	var list bytes.Buffer
	if err := writeFileList(&list, filepath.Join(state, release.RootfsDir), a.FileHash); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, release.FilesFile), list.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cold{rootfs: filepath.Join(staged, release.RootfsDir), log: slog.New(slog.DiscardHandler)}
	if c.a, err = extract.New(c.rootfs, opts(staged)); err != nil {
		t.Fatal(err)
	}
	defer c.a.Close()
	if err := c.linkFrom(&layerSource{k: len(base), dir: state, state: true}); err != nil {
		t.Fatalf("link the state: %v", err)
	}
	if limit > 0 {
		c.a.TrackChanges(limit)
	}
	for i, l := range top {
		if err := c.a.Apply(bytes.NewReader(l)); err != nil {
			return "", "", 0, fmt.Errorf("%w: %d: %w", errTopRefused, i, err)
		}
	}
	var d, w bytes.Buffer
	if kept, _, err = c.writeFiles(&d); err != nil {
		t.Fatalf("derive files.json: %v", err)
	}
	if err := writeFileList(&w, c.rootfs, nil); err != nil {
		t.Fatal(err)
	}
	return d.String(), w.String(), kept, nil
}

// derivedBase is the state the table's top layers change: nested
// directories, names that sort around "/" (a, a-b, a.b, a/...), hard
// links within and across directories, symlinks to a directory and to
// nothing, and a directory under a symlinked path.
func derivedBase() [][]byte {
	return [][]byte{
		tartest.New().
			Dir("a", 0o755).File("a/x", "ax", 0o644).File("a/y", "ay", 0o755).
			Dir("a/sub", 0o755).File("a/sub/f", "f", 0o644).Dir("a/sub/deep", 0o750).File("a/sub/deep/g", "g", 0o600).
			File("a-b", "dash", 0o644).Dir("a.b", 0o755).File("a.b/z", "z", 0o644).
			Dir("lib", 0o755).File("lib/shared.js", "shared", 0o644).File("lib/linked", "linked", 0o644).
			Link("lib/linked2", "lib/linked").Link("a/linked3", "lib/linked").
			Dir("lib/opq", 0o755).File("lib/opq/o1", "o1", 0o644).Dir("lib/opq/od", 0o755).File("lib/opq/od/o2", "o2", 0o644).
			Symlink("alias", "lib").Symlink("dangling", "/run/x").Symlink("var", "/nowhere").
			Dir("e", 0o755).File("e/keep", "keep", 0o644).
			Bytes(),
		tartest.New().File("lib/shared.js", "shared, second layer", 0o644).Dir("z", 0o755).File("z/last", "l", 0o644).Bytes(),
	}
}

// TestDerivedFileListEqualsWalk: the files.json an upgrade's staging
// derives from its layer state's files.json and the directories the top
// layers changed is, byte for byte, the one a walk of the whole new tree
// (reading every file) writes, whatever the top layers do: add, rewrite,
// remove by whiteout, hide under an opaque directory, link, replace a
// directory by a file or a file by a directory, write through symlinks,
// make directories on the way; and it keeps the untouched entries from
// the state's list (or walks everything once tracking gave up).
func TestDerivedFileListEqualsWalk(t *testing.T) {
	tb := func() *tartest.Builder { return tartest.New() }
	for _, tc := range []struct {
		name  string
		top   [][]byte
		limit int
		walk  bool // every entry looked at: tracking gave up
	}{
		{name: "empty top layer", top: [][]byte{tb().Bytes()}},
		{name: "new file", top: [][]byte{tb().File("app/v2", "v2", 0o644).Bytes()}},
		{name: "file changed by the top layer", top: [][]byte{tb().File("a/sub/f", "f v2, longer", 0o644).Bytes()}},
		{name: "file re-moded", top: [][]byte{tb().File("a/x", "ax", 0o700).Bytes()}},
		{name: "directory re-moded, no children", top: [][]byte{tb().Dir("a/sub", 0o700).Bytes()}},
		{name: "whiteout of a file", top: [][]byte{tb().Whiteout("a/sub/deep", "g").Bytes()}},
		{name: "whiteout of a directory tree", top: [][]byte{tb().Whiteout("a", "sub").Bytes()}},
		{name: "whiteout of a top-level name between others", top: [][]byte{tb().Whiteout("", "a-b").Whiteout("", "a").Bytes()}},
		{name: "opaque directory", top: [][]byte{tb().Opaque("lib/opq").File("lib/opq/new", "n", 0o644).Bytes()}},
		{name: "opaque directory emptied", top: [][]byte{tb().Opaque("lib/opq").Bytes()}},
		{name: "opaque directory keeping a child it rewrites", top: [][]byte{tb().Opaque("lib/opq").Dir("lib/opq/od", 0o755).File("lib/opq/od/o3", "o3", 0o644).Bytes()}},
		{name: "hard link to a state file", top: [][]byte{tb().Link("app/alias", "lib/linked").Bytes()}},
		{name: "hard link, then its target replaced", top: [][]byte{tb().Link("app/alias", "lib/linked").File("lib/linked", "replaced", 0o755).Bytes()}},
		{name: "one of three hard links replaced", top: [][]byte{tb().File("a/linked3", "mine", 0o644).Bytes()}},
		{name: "directory replaced by a file", top: [][]byte{tb().File("a/sub", "now a file", 0o644).Bytes()}},
		{name: "file replaced by a directory", top: [][]byte{tb().Dir("a/x", 0o755).File("a/x/in", "in", 0o644).Bytes()}},
		{name: "directory replaced by a symlink", top: [][]byte{tb().Symlink("a.b", "a").Bytes()}},
		{name: "symlink replaced by a directory", top: [][]byte{tb().Dir("alias", 0o755).File("alias/own", "own", 0o644).Bytes()}},
		{name: "file written through a symlinked directory", top: [][]byte{tb().File("alias/through", "t", 0o644).Bytes()}},
		{name: "whiteout through a symlinked directory", top: [][]byte{tb().Whiteout("alias", "shared.js").Bytes()}},
		{name: "directories made behind a dangling symlink", top: [][]byte{tb().File("var/run/pid", "1", 0o644).Bytes()}},
		{name: "directory made off the canonical path", top: [][]byte{tb().Symlink("s", "e/p/../../t").File("s/f", "f", 0o644).Bytes()}},
		{name: "implicit parents of a deep new file", top: [][]byte{tb().File("n1/n2/n3/f", "deep", 0o644).Bytes()}},
		{name: "changes beside names that sort around the slash", top: [][]byte{tb().File("a/w", "w", 0o644).File("a.b/z", "z2", 0o644).Bytes()}},
		{name: "two top layers: added, then whited out", top: [][]byte{
			tb().File("a/sub/new", "n", 0o644).Dir("fresh", 0o755).File("fresh/f", "f", 0o644).Bytes(),
			tb().Whiteout("a/sub", "new").Opaque("fresh").Bytes(),
		}},
		{name: "directory replaced by a file, a symlink, then an empty directory", top: [][]byte{
			tb().File("lib/opq", "file", 0o644).Symlink("alias/opq", "../a").Dir("lib/opq", 0o755).Bytes(),
		}},
		{name: "directory whited out, then made again empty", top: [][]byte{tb().Whiteout("a", "sub").Bytes(), tb().Dir("a/sub", 0o755).Bytes()}},
		{name: "directory whited out, then made again on the way to a file", top: [][]byte{tb().Whiteout("a", "sub").Bytes(), tb().File("a/sub/deep/new", "n", 0o644).Bytes()}},
		{name: "two top layers: removed, then made again as another type", top: [][]byte{
			tb().Whiteout("lib", "opq").Bytes(),
			tb().File("lib/opq", "file now", 0o644).Bytes(),
		}},
		{name: "tracking limit passed: the whole tree walked", top: [][]byte{tb().File("a/sub/deep/h", "h", 0o644).Bytes()}, limit: 2, walk: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			derived, walked, kept, err := stageOver(t, derivedBase(), tc.top, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(walked, derived); d != "" {
				t.Errorf("derived files.json differs from a walk's (-walk +derived):\n%s", d)
			}
			if tc.walk && kept != 0 {
				t.Errorf("%d entries taken from the state's list; want none (tracking gave up)", kept)
			}
			if !tc.walk && strings.Contains(tc.name, "new file") && kept == 0 {
				t.Errorf("no entry taken from the state's list: the whole tree was looked at")
			}
		})
	}
}

// fuzzLayer builds a layer from b: each three bytes one entry (a file,
// directory, symlink, hard link, whiteout or opaque whiteout) at a name
// of a small namespace where names collide, nest, alias through
// symlinks and sort around "/".
func fuzzLayer(b []byte) []byte {
	dirs := []string{"", "a", "a/sub", "a.b", "lib", "alias", "lib/opq", "n"}
	leaves := []string{"x", "sub", "a", "a-b", "a.b", "opq", "linked", "f"}
	targets := []string{"lib", "../a", "/a/sub", "nowhere", "a.b/../lib"}
	tw := tartest.New()
	for i := 0; i+2 < len(b); i += 3 {
		d, l := dirs[int(b[i+1])%len(dirs)], leaves[int(b[i+2])%len(leaves)]
		name := strings.TrimPrefix(d+"/"+l, "/")
		switch b[i] % 7 {
		case 0, 1:
			tw.File(name, name+string(b[i:i+3]), 0o600|int64(b[i+2]&0o77))
		case 2:
			tw.Dir(name, 0o700|int64(b[i+1]&0o55))
		case 3:
			tw.Symlink(name, targets[int(b[i+2])%len(targets)])
		case 4:
			tw.Link(name, "lib/linked")
		case 5:
			tw.Whiteout(d, l)
		case 6:
			tw.Opaque(d)
		}
	}
	return tw.Bytes()
}

// FuzzDerivedFileList: over the table's state, any one or two top
// layers the applier accepts leave a tree whose derived files.json
// equals a walk's.
func FuzzDerivedFileList(f *testing.F) {
	for _, seed := range []string{
		"\x00\x01\x01", "\x05\x01\x01", "\x06\x06\x00\x00\x06\x07", "\x02\x01\x01\x00\x02\x00",
		"\x03\x00\x04\x00\x05\x07", "\x04\x07\x00\x05\x04\x06", "\x05\x00\x01\x00\x00\x01",
		"\x06\x05\x00\x03\x04\x01\x00\x05\x00", "\x02\x03\x03\x05\x00\x00\x01\x07\x07",
	} {
		f.Add([]byte(seed), []byte("\x05\x02\x02\x00\x04\x03"))
	}
	f.Fuzz(func(t *testing.T, l1, l2 []byte) {
		if len(l1)+len(l2) > 300 {
			return
		}
		derived, walked, _, err := stageOver(t, derivedBase(), [][]byte{fuzzLayer(l1), fuzzLayer(l2)}, 0)
		if errors.Is(err, errTopRefused) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(walked, derived); d != "" {
			t.Errorf("derived files.json differs from a walk's (-walk +derived):\n%s", d)
		}
	})
}
