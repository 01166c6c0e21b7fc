package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/extract"
	"github.com/hermesbox/hbx/internal/tartest"
)

// sealed gzips a tar stream and, with encrypt, encrypts it with testPass,
// as hbx backup would.
func sealed(t *testing.T, tarBytes []byte, encrypted bool) []byte {
	t.Helper()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(tarBytes)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if !encrypted {
		return gz.Bytes()
	}
	var out bytes.Buffer
	w, err := encrypt(&out, testPass, "x.tar.gz", tartest.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(gz.Bytes())
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// withManifest starts a tar stream with a manifest listing files.
func withManifest(files ...File) *tartest.Builder {
	m := Manifest{Format: ManifestFormat, Created: tartest.Epoch, HbxVersion: "test", DataDir: "/d", Files: files}
	b, _ := json.Marshal(m)
	return tartest.New().Header(&tar.Header{Typeflag: tar.TypeReg, Name: ManifestName, Mode: 0o600}, b)
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// listing names what lies beside the data directory.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// TestRefusals: every damaged or hostile archive is refused by Verify and
// by Restore with a clear error, and Restore changes nothing: the data
// directory is as it was, with nothing left beside it.
func TestRefusals(t *testing.T) {
	g := newGPG(t, testPass)
	good := newBox(t)
	write(t, good.data, "a 0644 alpha", "d/ 0755", "d/b 0600 beta")
	ours := good.backup(nil)
	oursBytes, err := os.ReadFile(ours.Path)
	if err != nil {
		t.Fatal(err)
	}
	plainRes := good.backup(func(o *Options) { o.Encrypt = false })
	plainBytes, err := os.ReadFile(plainRes.Path)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(b []byte, at int) []byte {
		c := append([]byte(nil), b...)
		c[at] ^= 0x40
		return c
	}
	// A plain archive has only gzip's CRC of the output: a flipped bit in
	// a dynamic Huffman table's entry for a symbol the block never uses
	// decodes to the same bytes, and such an archive is rightly accepted.
	// Archives differ from run to run (times), so the flip is moved on
	// to the first byte at or after at whose flip gzip notices or that
	// changes what the archive holds.
	plainOut, err := gunzipAll(plainBytes)
	if err != nil {
		t.Fatal(err)
	}
	flipPlain := func(at int) []byte {
		for ; at < len(plainBytes); at++ {
			c := flip(plainBytes, at)
			if out, err := gunzipAll(c); err != nil || !bytes.Equal(out, plainOut) {
				return c
			}
		}
		t.Fatalf("no byte of the plain archive from %d on changes it when flipped", at)
		return nil
	}
	rootDir := func() *tartest.Builder { return tartest.New().Dir("./", 0o700) }
	fileA := File{Path: "a", Type: TypeFile, Mode: 0o644, Size: 5, SHA256: sum("alpha")}
	dot := File{Path: ".", Type: TypeDir, Mode: 0o700}
	unprotected, err := g.run([]byte("x"), "--symmetric", "--rfc2440", "--cipher-algo", "CAST5")
	if err != nil {
		t.Fatal(err)
	}
	stored, err := g.run(sealed(t, rootDir().File("a", "x", 0o644).Bytes(), false), "--store")
	if err != nil {
		t.Fatal(err)
	}

	type refusal struct {
		name    string
		archive []byte
		pass    []byte
		want    error
		entry   string // the entry the error must name, if any
	}
	var flips []refusal
	for i := 1; i < 8; i++ {
		flips = append(flips,
			refusal{fmt.Sprintf("flipped byte at %d/8", i), flip(oursBytes, len(oursBytes)*i/8), testPass, ErrCorrupt, ""},
			refusal{fmt.Sprintf("flipped byte at %d/8 of a plain archive", i), flipPlain(len(plainBytes) * i / 8), nil, ErrCorrupt, ""})
	}
	for _, tc := range append(flips, []refusal{
		{"wrong passphrase", oursBytes, []byte("wrong"), ErrUndecryptable, ""},
		{"empty passphrase", oursBytes, []byte{}, ErrNoPassphrase, ""},
		{"truncated to half", oursBytes[:len(oursBytes)/2], testPass, ErrCorrupt, ""},
		{"last byte missing", oursBytes[:len(oursBytes)-1], testPass, ErrCorrupt, ""},
		{"truncated plain archive", plainBytes[:len(plainBytes)-10], nil, ErrCorrupt, ""},
		{"flipped byte in the MDC", flip(oursBytes, len(oursBytes)-3), testPass, ErrCorrupt, ""},
		{"garbage after the message", append(append([]byte(nil), oursBytes...), "junk"...), testPass, ErrCorrupt, ""},
		{"empty file", nil, testPass, ErrCorrupt, ""},
		{"not a tar stream", sealed(t, bytes.Repeat([]byte("not tar "), 200), true), testPass, ErrCorrupt, ""},
		{"no integrity protection (gpg --rfc2440)", unprotected, testPass, ErrNotProtected, ""},
		{"not encrypted (gpg --store)", stored, testPass, ErrNotProtected, ""},
		{"manifest lists a missing file", sealed(t, withManifest(dot, fileA, File{Path: "missing", Type: TypeFile, Mode: 0o644, Size: 1, SHA256: sum("m")}).
			Dir("./", 0o700).File("./a", "alpha", 0o644).Bytes(), true), testPass, ErrMismatch, "missing"},
		{"content differs from the manifest", sealed(t, withManifest(dot, fileA).Dir("./", 0o700).File("./a", "alphA", 0o644).Bytes(), true), testPass, ErrMismatch, "a"},
		{"mode differs from the manifest", sealed(t, withManifest(dot, fileA).Dir("./", 0o700).File("./a", "alpha", 0o755).Bytes(), true), testPass, ErrMismatch, "./a"},
		{"entry not in the manifest", sealed(t, withManifest(dot, fileA).Dir("./", 0o700).File("./a", "alpha", 0o644).File("./extra", "", 0o644).Bytes(), true), testPass, ErrMismatch, "./extra"},
		{"entry twice", sealed(t, rootDir().File("a", "1", 0o644).File("./a", "2", 0o644).Bytes(), true), testPass, ErrMismatch, "./a"},
		{"../ entry", sealed(t, rootDir().File("../escape", "x", 0o644).Bytes(), true), testPass, extract.ErrUnsafePath, "../escape"},
		{"a/../../ entry", sealed(t, rootDir().Dir("a", 0o755).File("a/../../escape", "x", 0o644).Bytes(), false), nil, extract.ErrUnsafePath, "a/../../escape"},
		{"absolute entry", sealed(t, rootDir().File("/etc/escape", "x", 0o644).Bytes(), true), testPass, extract.ErrUnsafePath, "/etc/escape"},
		{"symlink escape, absolute", sealed(t, rootDir().Symlink("evil", "/").File("evil/tmp/escape", "x", 0o644).Bytes(), true), testPass, extract.ErrUnsafePath, "evil/tmp/escape"},
		{"symlink escape, relative", sealed(t, rootDir().Symlink("up", "../../../..").Dir("up/x", 0o755).Bytes(), true), testPass, extract.ErrUnsafePath, "up/x"},
		{"symlink escape, nested", sealed(t, rootDir().Dir("d", 0o755).Symlink("d/l", "/etc").File("d/l/passwd", "x", 0o644).Bytes(), true), testPass, extract.ErrUnsafePath, "d/l/passwd"},
		{"hardlink out", sealed(t, rootDir().Link("h", "../../etc/passwd").Bytes(), true), testPass, extract.ErrUnsafePath, "h"},
		{"hardlink to nothing", sealed(t, rootDir().Link("h", "absent").Bytes(), true), testPass, extract.ErrBadLink, "h"},
		{"device", sealed(t, rootDir().Header(&tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3, Mode: 0o666}, nil).Bytes(), true), testPass, extract.ErrUnsupportedType, "null"},
		{"root is a file", sealed(t, append(tartest.Raw(".", tar.TypeReg, nil, []byte("x")), tartest.End()...), true), testPass, extract.ErrUnsafePath, "."},
	}...) {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t)
			richTree(t, b.data)
			write(t, filepath.Dir(b.data), "outside 0644 keep")
			before := snapshot(t, filepath.Dir(b.data))
			beside := listing(t, filepath.Dir(b.data))
			archive := filepath.Join(b.root, "archive.tar.gz.gpg")
			if err := os.WriteFile(archive, tc.archive, 0o600); err != nil {
				t.Fatal(err)
			}
			_, verr := Verify(context.Background(), archive, passFunc(tc.pass))
			o := b.restoreOptions(archive)
			o.Passphrase = passFunc(tc.pass)
			_, rerr := Restore(context.Background(), o)
			for what, err := range map[string]error{"Verify": verr, "Restore": rerr} {
				if !errors.Is(err, tc.want) {
					t.Errorf("%s() = %v, want %v", what, err, tc.want)
					continue
				}
				if tc.entry != "" {
					if p, ok := BadEntry(err); !ok || p != tc.entry {
						t.Errorf("BadEntry(%s error %q) = %q, %v; want %q", what, err, p, ok, tc.entry)
					}
				}
				if strings.Contains(err.Error(), string(testPass)) {
					t.Errorf("%s() error %q contains the passphrase", what, err)
				}
			}
			if diff := cmp.Diff(withoutRoot(snapshot(t, filepath.Dir(b.data))), withoutRoot(before)); diff != "" {
				t.Errorf("Restore changed the tree (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(listing(t, filepath.Dir(b.data)), beside); diff != "" {
				t.Errorf("Restore left something beside the data directory (-got +want):\n%s", diff)
			}
		})
	}
}

// gunzipAll returns what the gzip stream b holds, or the error that ends
// reading it (a CRC or length mismatch included).
func gunzipAll(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}
