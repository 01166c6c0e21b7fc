package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
)

// TestRegistryCAE2E: a private registry that speaks HTTPS with its own CA
// (issue 16). Without the CA hbx install fails with one line naming the
// certificate problem and activates nothing; with the CA in
// registry.certs_dir (<dir>/<host:port>/ca.crt) the install pulls and
// activates; a certs_dir that does not exist, or a CA file in it that
// holds no certificate, is refused when the configuration loads (exit 2,
// one line naming registry.certs_dir), hbx config show included.
func TestRegistryCAE2E(t *testing.T) {
	requireE2E(t)
	tlsDir := t.TempDir()
	files, err := registrytest.WriteTLS(tlsDir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	reg := testenv.StartRegistryWith(t, t.TempDir(), testenv.Options{TLS: &testenv.TLS{Cert: files.Cert, Key: files.Key, CA: files.CA}})
	img := testImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := reg.Host() + "/rhyssullivan/executor-selfhost:v1.5.12"
	idx, err := testimage.Push(ctx, img.Dir, ref)
	if err != nil {
		t.Fatalf("push over https: %v", err)
	}
	b := newBox(t, reg, ref+"@"+idx.String(), nil, "")
	// TLS verified: the registry is not an insecure host.
	cfg := readFile(t, b.config)
	line := fmt.Sprintf("  insecure_hosts: [%q]\n", reg.Host())
	if !strings.Contains(cfg, line) {
		t.Fatalf("%s has no line %q", b.config, line)
	}
	writeFile(t, b.config, strings.Replace(cfg, line, "  insecure_hosts: []\n", 1), 0o600)

	// Without the CA: one line naming the certificate, nothing active.
	r := b.hbx("install")
	errs := errorLines(t, r.stderr)
	if r.code == 0 || len(errs) != 1 || !strings.Contains(errs[0], "certificate signed by unknown authority") ||
		!strings.Contains(errs[0], reg.Host()) || !strings.Contains(errs[0], "registry.certs_dir") {
		t.Fatalf("hbx install without the CA = %d, stderr %q; want one error line naming the registry, its certificate and registry.certs_dir", r.code, r.stderr)
	}
	t.Logf("without the CA: %s", errs[0])
	if cur := b.current(); cur != "" {
		t.Fatalf("a release is active after the failed install: %s", cur)
	}

	// A certs_dir that does not exist: refused, not taken as "no CAs",
	// by the configuration's load (exit 2), hbx config show too.
	certsDir := filepath.Join(b.dir, "certs.d")
	appendConfig(t, b, "  certs_dir: "+certsDir+"\n") // inside registry:, the last section newBox writes
	want := "bad registry.certs_dir: stat " + certsDir + ": no such file or directory"
	for _, args := range [][]string{{"install"}, {"config", "show"}} {
		r := b.hbx(args...)
		if errs := errorLines(t, r.stderr); r.code != 2 || len(errs) != 1 || !strings.Contains(errs[0], want) {
			t.Fatalf("hbx %s with a missing certs_dir = %d, stderr %q; want exit 2 and one error line %q", strings.Join(args, " "), r.code, r.stderr, want)
		}
	}

	// With the CA for host:port: the install pulls and activates.
	hostDir := filepath.Join(certsDir, reg.Host())
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A CA file that holds no PEM certificate: named, not skipped (the
	// image library skips it and the pull then blames a missing CA).
	bad := filepath.Join(hostDir, "ca.crt")
	writeFile(t, bad, "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", 0o644)
	r = b.hbx("install")
	if errs := errorLines(t, r.stderr); r.code != 2 || len(errs) != 1 || !strings.Contains(errs[0], "bad registry.certs_dir: "+bad+" holds no PEM certificate") {
		t.Fatalf("hbx install with a garbage ca.crt = %d, stderr %q; want exit 2 and one error line naming registry.certs_dir and %s", r.code, r.stderr, bad)
	}
	if cur := b.current(); cur != "" {
		t.Fatalf("a release is active after the failed install: %s", cur)
	}
	writeFile(t, filepath.Join(hostDir, "ca.crt"), readFile(t, files.CA), 0o644)
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install with the CA in %s = %d\n%s", hostDir, r.code, r.stderr)
	}
	if b.current() == "" {
		t.Fatal("no release active after the install with the CA")
	}
}
