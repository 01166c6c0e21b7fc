// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"

	"github.com/hermesbox/hbx/internal/pgpsym"
	"github.com/hermesbox/hbx/internal/regfile"
)

// Entries of a saved box archive (gpg -d | tar -xz): the executor's own
// hbx backup archive, as hbx restore reads it, and the agent's volume.
const (
	savedExecutor = "executor.tar.gz.gpg"
	savedAgent    = "agent" // the agent volume's /workspace, renamed
)

// ErrPassphrase: the archive does not open with the passphrase given.
var ErrPassphrase = errors.New("wrong passphrase or not a box archive")

// maxPassphraseFile bounds what readPassphrase reads (hbx backup writes a
// 65-byte line).
const maxPassphraseFile = 64 << 10

// readPassphrase returns the first line of a passphrase file (as gpg
// --passphrase-file reads it). A file that cannot be read, is not a
// regular file (a FIFO would block the read for ever), is larger than
// 64 KiB, is readable by others than its owner, or starts with an empty
// line is refused (ErrInvalid), as hbx backup refuses its passphrase_file.
func readPassphrase(file string) ([]byte, error) {
	if file == "" {
		return nil, fmt.Errorf("--passphrase-file is required: the file holding the passphrase the archive was saved with (the saved box's backup.pass): %w", ErrInvalid)
	}
	data, mode, err := regfile.ReadPrivate(file, maxPassphraseFile)
	if err != nil {
		return nil, fmt.Errorf("passphrase file: %w (%w)", err, ErrInvalid)
	}
	if mode&0o077 != 0 {
		return nil, fmt.Errorf("passphrase file %s has mode %04o: want 0600 or stricter (chmod 600 %s): %w", file, mode, file, ErrInvalid)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	if len(line) == 0 {
		return nil, fmt.Errorf("passphrase file %s: its first line is empty: %w", file, ErrInvalid)
	}
	return line, nil
}

// sealWriter is the tar writer of an archive being written: tar, gzip,
// OpenPGP, w. Close finishes all three (not w).
type sealWriter struct {
	*tar.Writer
	gz  *gzip.Writer
	enc io.WriteCloser
}

func seal(w io.Writer, pass []byte) (*sealWriter, error) {
	enc, err := pgpsym.Encrypt(w, pass, "", time.Now())
	if err != nil {
		return nil, err
	}
	gz := gzip.NewWriter(enc)
	return &sealWriter{Writer: tar.NewWriter(gz), gz: gz, enc: enc}, nil
}

func (s *sealWriter) Close() error {
	return errors.Join(s.Writer.Close(), s.gz.Close(), s.enc.Close())
}

// unseal opens an archive written by seal (or by gpg --symmetric over a
// tar.gz). Read the tar reader to its end, then rest to io.EOF, before
// trusting anything: the integrity check comes at the end.
func unseal(r io.Reader, pass []byte) (tr *tar.Reader, rest io.Reader, err error) {
	tried := false
	prompt := func(_ []openpgp.Key, symmetric bool) ([]byte, error) {
		if !symmetric || tried {
			return nil, ErrPassphrase
		}
		tried = true
		return pass, nil
	}
	md, err := openpgp.ReadMessage(r, nil, prompt, pgpsym.ReadConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("decrypt: %w (%w)", ErrPassphrase, ErrInvalid)
	}
	gz, err := gzip.NewReader(md.UnverifiedBody)
	if err != nil {
		return nil, nil, fmt.Errorf("decompress: %w", err)
	}
	return tar.NewReader(gz), gz, nil
}

// copyEntries copies every entry of tr into tw, the leading path element
// from replaced by to, a hard link's target too (renameEntry: entries or
// link targets outside from and device nodes are refused).
func copyEntries(tw *tar.Writer, tr *tar.Reader, from, to string) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		if err := renameEntry(h, from, to); err != nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// renameEntry renames h from under from to under to (rename), a hard
// link's target too, and refuses device nodes (dockerd would make them as
// root in the agent's filesystem).
func renameEntry(h *tar.Header, from, to string) error {
	var err error
	if h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock {
		return fmt.Errorf("archive entry %q: a device node: %w", h.Name, ErrInvalid)
	}
	if h.Name, err = rename(h.Name, from, to); err != nil {
		return err
	}
	if h.Typeflag == tar.TypeLink {
		if h.Linkname, err = rename(h.Linkname, from, to); err != nil {
			return fmt.Errorf("hard link %s: %w", h.Name, err)
		}
	}
	return nil
}

// rename replaces the first element from of a clean relative tar name by
// to; anything else (absolute, "..", another first element) is refused.
func rename(name, from, to string) (string, error) {
	clean := path.Clean(strings.TrimPrefix(name, "./"))
	if clean == from {
		return to, nil
	}
	rest, ok := strings.CutPrefix(clean, from+"/")
	if !ok || path.IsAbs(name) || rest == ".." || strings.HasPrefix(rest, "../") {
		return "", fmt.Errorf("archive entry %q: want one under %s/: %w", name, from, ErrInvalid)
	}
	return to + "/" + rest, nil
}

// copyOut streams `docker cp CONTAINER:SRC -` (a tar of SRC) to fn.
func (d Docker) copyOut(ctx context.Context, container, src string, fn func(*tar.Reader) error) error {
	cmd := d.dockerCmd(ctx, "cp", container+":"+src, "-")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return err
	}
	ferr := fn(tar.NewReader(out))
	_, _ = io.Copy(io.Discard, out)
	if werr := cmd.Wait(); werr != nil {
		return fmt.Errorf("docker cp %s:%s: %w%s", container, src, werr, lastLine(errb.String()))
	}
	return ferr
}

// copyIn streams the tar fill writes into `docker cp -a - CONTAINER:DST`
// (-a: the entries' owners are kept).
func (d Docker) copyIn(ctx context.Context, container, dst string, fill func(*tar.Writer) error) error {
	cmd := d.dockerCmd(ctx, "cp", "-a", "-", container+":"+dst)
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return err
	}
	tw := tar.NewWriter(in)
	ferr := fill(tw)
	ferr = errors.Join(ferr, tw.Close(), in.Close())
	if werr := cmd.Wait(); werr != nil {
		return fmt.Errorf("docker cp - %s:%s: %w%s", container, dst, werr, lastLine(errb.String()))
	}
	return ferr
}
