package backup

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/testenv"
)

// gpg runs the real gpg (Debian's gnupg) in batch mode with its own home
// and a passphrase file holding pass.
type gpg struct {
	t        *testing.T
	bin      string
	home     string
	passFile string
}

func newGPG(t *testing.T, pass []byte) *gpg {
	t.Helper()
	bin, err := exec.LookPath("gpg")
	if err != nil {
		testenv.Missing(t, "gpg is not installed (apt-get install gnupg)")
	}
	// A short home: gpg-agent's socket path must fit 107 bytes.
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		t.Fatal(err)
	}
	g := &gpg{t: t, bin: bin, home: home, passFile: filepath.Join(home, "pass")}
	if err := os.WriteFile(g.passFile, append(append([]byte(nil), pass...), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kill := exec.Command("gpgconf", "--kill", "gpg-agent")
		kill.Env = append(os.Environ(), "GNUPGHOME="+home)
		_ = kill.Run()
		os.RemoveAll(home)
	})
	return g
}

// run runs gpg with args after the batch options, feeding stdin.
func (g *gpg) run(stdin []byte, args ...string) ([]byte, error) {
	g.t.Helper()
	base := []string{"--batch", "--yes", "--no-tty", "--quiet", "--no-symkey-cache", "--pinentry-mode", "loopback", "--passphrase-file", g.passFile}
	cmd := exec.Command(g.bin, append(base, args...)...)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+g.home)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), &execError{err, errb.String()}
	}
	return out.Bytes(), nil
}

type execError struct {
	err    error
	stderr string
}

func (e *execError) Error() string { return e.err.Error() + ": " + e.stderr }

// sh runs a shell pipeline and fails the test when it fails.
func sh(t *testing.T, script string, env ...string) {
	t.Helper()
	cmd := exec.Command("sh", "-ec", script)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sh -c %q: %v\n%s", script, err, out)
	}
}

// TestGPGDecryptsOurArchives: `gpg --decrypt | tar -x` restores what hbx
// backup archived, byte for byte, with modes, owners, times, links and
// xattrs (the manifest is extracted too; the data's own file of that name
// comes after it and wins).
func TestGPGDecryptsOurArchives(t *testing.T) {
	g := newGPG(t, testPass)
	for _, c := range []Compression{Gzip, Zstd} {
		t.Run(string(c), func(t *testing.T) {
			if c == Zstd {
				if _, err := exec.LookPath("zstd"); err != nil {
					testenv.Missing(t, "zstd(1) is not installed (apt-get install zstd)")
				}
			}
			b := newBox(t)
			richTree(t, b.data)
			want := snapshot(t, b.data)
			res := b.backup(func(o *Options) { o.Compression = c })
			plain, err := g.run(nil, "--decrypt", res.Path)
			if err != nil {
				t.Fatalf("gpg --decrypt %s: %v", res.Path, err)
			}
			out := filepath.Join(t.TempDir(), "out")
			if err := os.Mkdir(out, 0o700); err != nil {
				t.Fatal(err)
			}
			tarball := filepath.Join(t.TempDir(), "x.tar."+map[Compression]string{Gzip: "gz", Zstd: "zst"}[c])
			if err := os.WriteFile(tarball, plain, 0o600); err != nil {
				t.Fatal(err)
			}
			decomp := map[Compression]string{Gzip: "gzip -dc", Zstd: "zstd -qdc"}[c]
			sh(t, decomp+` "$A" | tar -x --xattrs --xattrs-include='*' --numeric-owner -p -C "$O"`, "A="+tarball, "O="+out)
			if diff := cmp.Diff(withoutRoot(snapshot(t, out)), withoutRoot(want)); diff != "" {
				t.Errorf("gpg -d | tar -x tree (-got +want):\n%s", diff)
			}
		})
	}
}

// TestWeReadGPGArchives: archives made by `tar -czf - -C DATA . | gpg
// --symmetric` (the format boxes already have), with gpg's defaults and
// with other choices, verify and restore; what has no manifest is said.
func TestWeReadGPGArchives(t *testing.T) {
	g := newGPG(t, testPass)
	for _, tc := range []struct {
		name    string
		tar     string // the tar command's options
		gpgArgs []string
		xattrs  bool
	}{
		{"the issue's pipeline", "-czf -", []string{"--symmetric"}, false},
		{"posix tar with xattrs", "--xattrs --format=posix -czf -", []string{"--symmetric"}, true},
		{"armored AES-128 SHA-512 uncompressed", "-czf -", []string{"--symmetric", "--armor", "--cipher-algo", "AES128", "--s2k-digest-algo", "SHA512", "--compress-algo", "none"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t)
			richTree(t, b.data)
			want := snapshot(t, b.data)
			tarball := filepath.Join(b.root, "plain.tar.gz")
			sh(t, `tar `+tc.tar+` -C "$D" . > "$T"`, "D="+b.data, "T="+tarball)
			tgz, err := os.ReadFile(tarball)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := g.run(tgz, tc.gpgArgs...)
			if err != nil {
				t.Fatalf("gpg %v: %v", tc.gpgArgs, err)
			}
			archive := filepath.Join(b.root, "old-box.tar.gz.gpg")
			if err := os.WriteFile(archive, enc, 0o600); err != nil {
				t.Fatal(err)
			}
			vr, err := Verify(context.Background(), archive, passFunc(testPass))
			if err != nil {
				t.Fatalf("Verify(gpg archive) = %v", err)
			}
			if vr.Manifest != nil || len(vr.Unchecked) == 0 || !vr.Encrypted || vr.Compression != "gzip" {
				t.Errorf("Verify(gpg archive) = %+v, want encrypted gzip without manifest, saying what was not checked", vr)
			}
			write(t, b.data, "db/main.sqlite 0600 changed since")
			rr, err := Restore(context.Background(), b.restoreOptions(archive))
			if err != nil {
				t.Fatalf("Restore(gpg archive) = %v", err)
			}
			if len(rr.Notes) == 0 || !strings.Contains(rr.Notes[0], "no "+ManifestName) {
				t.Errorf("Restore notes = %q, want one saying there is no manifest", rr.Notes)
			}
			got := withoutRoot(snapshot(t, b.data))
			exp := withoutRoot(want)
			if !tc.xattrs {
				// GNU tar's default format keeps neither xattrs nor
				// sub-second times.
				got, exp = wholeSeconds(dropXattrs(got)), wholeSeconds(dropXattrs(exp))
			}
			if diff := cmp.Diff(got, exp); diff != "" {
				t.Errorf("restored tree (-got +want):\n%s", diff)
			}
		})
	}
}

func dropXattrs(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i], _, _ = strings.Cut(l, " xattrs=")
	}
	return out
}

// wholeSeconds truncates the mtimes (ns) of snapshot lines to seconds.
func wholeSeconds(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		f := strings.SplitN(l, " ", 5)
		if len(f) >= 4 && len(f[3]) > 9 {
			f[3] = f[3][:len(f[3])-9] + "000000000"
		}
		out[i] = strings.Join(f, " ")
	}
	return out
}
