// Package certsdir is the one check of registry.certs_dir, the directory
// of per-registry CA certificates in the containers certs.d layout
// (<dir>/<host[:port]>/*.crt): the configuration refuses a bad one when it
// loads (internal/config), and the installer checks it again before a pull
// (the directory may have changed since, and the installer has other
// callers). It only reads.
package certsdir

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hermesbox/hbx/internal/regfile"
)

// ErrInvalid is wrapped by every error of Check: the directory is
// unusable as it is, so retrying the pull cannot help.
var ErrInvalid = errors.New("bad registry.certs_dir")

// Check checks registry.certs_dir dir ("" means none): it must be a
// directory (a missing one would silently mean the system's roots), and
// each *.crt in <dir>/<host> must hold a PEM certificate (the image
// library skips one that holds none, and the pull would then fail as if no
// CA were configured). host "" checks every <host> directory in dir; an
// entry that is no directory, or a host without one, is not checked (the
// library ignores it: the system's roots). The error is one line naming
// the key and the path ("bad registry.certs_dir: /etc/hbx/certs.d is not
// a directory") and wraps ErrInvalid.
func Check(dir, host string) error {
	if dir == "" {
		return nil
	}
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	} else if !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrInvalid, dir)
	}
	hosts := []string{host}
	if host == "" {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		hosts = hosts[:0]
		for _, e := range entries {
			hosts = append(hosts, e.Name())
		}
	}
	for _, h := range hosts {
		if err := checkHost(filepath.Join(dir, h)); err != nil {
			return err
		}
	}
	return nil
}

// checkHost checks each *.crt in the host directory hd (nothing when it
// is no directory).
func checkHost(hd string) error {
	entries, err := os.ReadDir(hd)
	if err != nil {
		return nil // no CA for this host: the system's roots, as the library does
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".crt") {
			continue
		}
		p := filepath.Join(hd, e.Name())
		b, err := regfile.ReadFile(p, 1<<20)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return fmt.Errorf("%w: %s holds no PEM certificate", ErrInvalid, p)
		}
	}
	return nil
}
