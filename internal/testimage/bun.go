// SPDX-License-Identifier: Apache-2.0

package testimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/gzip"
)

// BunVersion is the Bun release in the pinned Executor image, and the one
// scripts/testdeps.sh fetches.
const BunVersion = "1.3.14"

// bunPackages maps a platform to the npm package holding Bun for it, and to
// the file name `npm pack` gives its tarball.
var bunPackages = map[string]struct{ pkg, file string }{
	"linux/amd64": {"@oven/bun-linux-x64", "oven-bun-linux-x64-" + BunVersion + ".tgz"},
	"linux/arm64": {"@oven/bun-linux-aarch64", "oven-bun-linux-aarch64-" + BunVersion + ".tgz"},
}

// bunMember is where npm packages of Bun keep the executable.
const bunMember = "package/bin/bun"

// BunTarballs returns the npm tarballs of Bun [BunVersion] that
// scripts/testdeps.sh leaves under repoRoot/.cache/npm/, keyed by platform
// ("linux/amd64", "linux/arm64"): oven-bun-linux-x64-1.3.14.tgz and
// oven-bun-linux-aarch64-1.3.14.tgz. It fails, naming the script, when
// either is missing; the error then matches [fs.ErrNotExist].
func BunTarballs(repoRoot string) (map[string]string, error) {
	out := make(map[string]string, len(bunPackages))
	for platform, p := range bunPackages {
		path := filepath.Join(repoRoot, ".cache", "npm", p.file)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("bun tarball for %s (%s@%s): %w; run scripts/testdeps.sh", platform, p.pkg, BunVersion, err)
		}
		out[platform] = path
	}
	return out, nil
}

// openBun opens the Bun executable inside the npm tarball tgz. The caller
// closes the reader.
func openBun(tgz string) (io.ReadCloser, int64, error) {
	f, err := os.Open(tgz)
	if err != nil {
		return nil, 0, fmt.Errorf("open bun tarball: %w", err)
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("read bun tarball %s: %w", tgz, err)
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			f.Close()
			return nil, 0, fmt.Errorf("read bun tarball %s: no %s", tgz, bunMember)
		}
		if err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("read bun tarball %s: %w", tgz, err)
		}
		if hdr.Name == bunMember && hdr.Typeflag == tar.TypeReg {
			return &tarMember{Reader: tr, f: f}, hdr.Size, nil
		}
	}
}

// tarMember reads one member of an open tar file and closes the file.
type tarMember struct {
	io.Reader
	f *os.File
}

func (m *tarMember) Close() error { return m.f.Close() }
