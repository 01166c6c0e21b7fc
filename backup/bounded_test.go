package backup

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/tartest"
)

// TestArchiveMembersBounded: what a reader holds in memory is bounded by
// what hbx writes, not by the archive: a manifest larger than
// MaxManifestBytes is refused from its header before it is read, a name
// longer than PATH_MAX is refused, and a manifest-less archive's names
// are bounded as a manifest is; each is one line, nothing changed (issue
// 25 item 4: a 243 MiB manifest in a 5.8 MB archive took 1.19 GB).
func TestArchiveMembersBounded(t *testing.T) {
	// Names of about 3,770 bytes (15 directories of 250), each fine, more
	// of them than a manifest could list.
	many, deep := tartest.New().Dir("./", 0o700), ""
	for range 15 {
		deep += strings.Repeat("n", 250) + "/"
		many.Dir(deep, 0o700)
	}
	for i := 0; i*len(deep) <= MaxManifestBytes; i++ {
		many.File(fmt.Sprintf("%s%05d", deep, i), "", 0o600)
	}
	tests := []struct {
		name string
		tar  []byte
		want string
	}{
		{"manifest larger than hbx writes", tartest.New().Header(&tar.Header{Typeflag: tar.TypeReg, Name: ManifestName, Mode: 0o600, Size: MaxManifestBytes + 1}, make([]byte, MaxManifestBytes+1)).Bytes(),
			fmt.Sprintf("claims %d bytes, more than the %d hbx writes at most", MaxManifestBytes+1, MaxManifestBytes)},
		{"name longer than PATH_MAX", tartest.New().Dir("./", 0o700).File(strings.Repeat("x", maxNameBytes+1), "x", 0o600).Bytes(),
			"longer than 4096 bytes"},
		{"link target longer than PATH_MAX", tartest.New().Dir("./", 0o700).Symlink("l", strings.Repeat("x", maxNameBytes+1)).Bytes(),
			"longer than 4096 bytes"},
		{"more names than a manifest holds", many.Bytes(), "bytes of entry names"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 live")
			before := snapshot(t, b.data)
			archive := filepath.Join(b.root, "a.tar.gz")
			must(t, os.WriteFile(archive, sealed(t, tt.tar, false), 0o600))
			_, verr := Verify(context.Background(), archive, nil)
			_, rerr := Restore(context.Background(), b.restoreOptions(archive))
			for what, err := range map[string]error{"Verify": verr, "Restore": rerr} {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
					t.Errorf("%s() = %v, want one line wrapping ErrCorrupt with %q", what, err, tt.want)
				}
			}
			if got := snapshot(t, b.data); strings.Join(got, "\n") != strings.Join(before, "\n") {
				t.Errorf("a refused restore changed the data")
			}
		})
	}
}

// TestCreateRefusesManifestItCannotRead: Create never writes a manifest
// larger than a reader takes (MaxManifestBytes).
func TestCreateRefusesManifestItCannotRead(t *testing.T) {
	m := &Manifest{Format: ManifestFormat}
	for i := 0; i*len(`{"path":"","type":"dir","mode":448}`) <= MaxManifestBytes; i++ {
		m.Files = append(m.Files, File{Path: fmt.Sprintf("d%07d", i), Type: TypeDir, Mode: 0o700})
	}
	err := writeEntries(tar.NewWriter(io.Discard), m, &scanner{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "backup.paths") {
		t.Errorf("writeEntries(%d entries) = %v, want ErrInvalid naming backup.paths", len(m.Files), err)
	}
}
