package certsdir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/registrytest"
)

// TestCheck: a missing certs_dir, a file in its place and a CA file
// without a certificate are refused with one line naming the key and the
// path (ErrInvalid); "" and a good directory pass; host "" checks every
// host, a host checks only its own.
func TestCheck(t *testing.T) {
	tls, err := registrytest.WriteTLS(t.TempDir(), "registry.box")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(tls.CA)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "certs.d", "good:5000"), filepath.Join(dir, "certs.d", "bad")
	for _, d := range []string{good, bad} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(good, "ca.crt"), ca, 0o644))
	must(os.WriteFile(filepath.Join(good, "notes.txt"), []byte("not a cert, not checked\n"), 0o644))
	must(os.WriteFile(filepath.Join(bad, "ca.crt"), []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "file"), nil, 0o644))
	certs := filepath.Join(dir, "certs.d")
	for _, tc := range []struct {
		dir, host, want string // want "" means accepted
	}{
		{"", "", ""},
		{certs, "good:5000", ""},
		{certs, "no-such-host", ""},
		{filepath.Join(dir, "missing"), "good:5000", "bad registry.certs_dir: stat " + dir + "/missing: no such file or directory"},
		{filepath.Join(dir, "file"), "", "bad registry.certs_dir: " + dir + "/file is not a directory"},
		{certs, "bad", "bad registry.certs_dir: " + bad + "/ca.crt holds no PEM certificate"},
		{certs, "", "bad registry.certs_dir: " + bad + "/ca.crt holds no PEM certificate"},
	} {
		err := Check(tc.dir, tc.host)
		if tc.want == "" {
			if err != nil {
				t.Errorf("Check(%q, %q) = %v, want nil", tc.dir, tc.host, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Check(%q, %q) = %v, want %q (ErrInvalid)", tc.dir, tc.host, err, tc.want)
		}
	}
}
