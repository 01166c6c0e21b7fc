package installer

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"syscall"
	"testing"

	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
)

// TestPlain: the image library's wrappers that restate the request are
// dropped from the message, and nothing from the chain.
func TestPlain(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	status := docker.UnexpectedHTTPStatusError{StatusCode: 503}
	cases := []struct {
		err    error
		want   string
		target error
	}{
		{fmt.Errorf("reading manifest sha256:ab in 127.0.0.1:5000/x: %w", errors.New("authentication required")), "authentication required", nil},
		{fmt.Errorf("fetching manifest sha256:ab in 127.0.0.1:5000/x: %w", &url.Error{Op: "Get", URL: "http://127.0.0.1:5000/v2/x/manifests/sha256:ab", Err: refused}),
			refused.Error(), syscall.ECONNREFUSED},
		{fmt.Errorf("pinging container registry 127.0.0.1:5000: %w", &url.Error{Op: "Get", URL: "http://127.0.0.1:5000/v2/", Err: io.EOF}), "EOF", io.EOF},
		{fmt.Errorf("fetching blob: %w", status), status.Error(), nil},
		{fmt.Errorf("decode: %w", io.ErrUnexpectedEOF), "decode: unexpected EOF", io.ErrUnexpectedEOF},
		{fmt.Errorf("no bytes for 1s (%w)", ErrStalled), "no bytes for 1s (stalled)", ErrStalled},
	}
	for _, c := range cases {
		got := plain(c.err)
		if got.Error() != c.want {
			t.Errorf("plain(%q) = %q, want %q", c.err, got, c.want)
		}
		if c.target != nil && !errors.Is(got, c.target) {
			t.Errorf("plain(%q) does not wrap %v", c.err, c.target)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("plain(%q) lost the original error", c.err)
		}
	}
	if _, ok := errors.AsType[docker.UnexpectedHTTPStatusError](plain(fmt.Errorf("fetching blob: %w", status))); !ok {
		t.Error("plain() hides the status error from errors.As")
	}
}

// TestSystemContextCertsDir: registry.certs_dir is the per-host
// certificate directory, and the all-hosts DockerCertPath, which the image
// library would prefer, is cleared; without it neither names a real place.
func TestSystemContextCertsDir(t *testing.T) {
	ref, err := reference.ParseNamed("registry.example:5000/executor")
	if err != nil {
		t.Fatal(err)
	}
	sys, err := systemContext(ref, RegistryOptions{CertsDir: "/etc/hbx/certs.d"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if sys.DockerPerHostCertDirPath != "/etc/hbx/certs.d" || sys.DockerCertPath != "" {
		t.Errorf("with CertsDir: DockerPerHostCertDirPath %q, DockerCertPath %q; want /etc/hbx/certs.d and empty", sys.DockerPerHostCertDirPath, sys.DockerCertPath)
	}
	scratch := t.TempDir()
	sys, err = systemContext(ref, RegistryOptions{}, scratch)
	if err != nil {
		t.Fatal(err)
	}
	if nowhere := filepath.Join(scratch, "none"); sys.DockerPerHostCertDirPath != nowhere || sys.DockerCertPath != nowhere {
		t.Errorf("without CertsDir: DockerPerHostCertDirPath %q, DockerCertPath %q; want both %s", sys.DockerPerHostCertDirPath, sys.DockerCertPath, nowhere)
	}
}
