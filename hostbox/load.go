// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hermesbox/hbx/internal/atomicfile"
)

// LoadOptions are the inputs of Load: a new box's, the archive, the
// passphrase it was saved with (the saved box's backup.pass), and Force
// to replace an existing box of the name.
type LoadOptions struct {
	NewOptions
	Archive        string
	PassphraseFile string
	Force          bool
}

// LoadResult is what Load made. Replaced is the archive the replaced box
// was saved to (its passphrase in Replaced + ".pass"), "" when Load
// replaced nothing.
type LoadResult struct {
	Box      Box
	Took     time.Duration
	Replaced string
}

// Load makes box o.Name from an archive of Save: the archive is opened and
// checked whole first (a wrong passphrase or a damaged archive changes
// nothing); an existing box is refused unless Force, which saves it
// beside the archive (keepReplaced) and then removes it (containers,
// volumes, directory); a box that cannot be saved is not replaced. The new box has a fresh
// key, the archive's passphrase as backup.pass, the agent's volume as
// saved, and Executor's data put back by hbx restore in the executor. It
// arrives quiesced: the executor runs, the agent is created but not
// started (hbx box start starts it). A failure removes what Load made.
func (d Docker) Load(ctx context.Context, o LoadOptions) (LoadResult, error) {
	start := time.Now()
	if err := ValidateName(o.Name); err != nil {
		return LoadResult{}, err
	}
	old, oerr := Open(o.Root, o.Name)
	if oerr == nil && !o.Force {
		return LoadResult{}, fmt.Errorf("load box %s: the box exists; load replaces it only with --force: %w", o.Name, ErrInvalid)
	}
	pass, err := readPassphrase(o.PassphraseFile)
	if err != nil {
		return LoadResult{}, err
	}
	tmp, err := os.MkdirTemp("", "hbx-box-load-")
	if err != nil {
		return LoadResult{}, err
	}
	defer os.RemoveAll(tmp)
	if err := unpackSaved(o.Archive, pass, tmp); err != nil {
		return LoadResult{}, fmt.Errorf("load box %s from %s: %w", o.Name, o.Archive, err)
	}
	var replaced string
	if oerr == nil {
		if replaced, err = d.keepReplaced(ctx, o, old, start); err != nil {
			return LoadResult{}, err
		}
		if _, err := d.Remove(ctx, o.Root, o.Name); err != nil {
			return LoadResult{Replaced: replaced}, err
		}
	}
	b, err := d.checkNew(ctx, &o.NewOptions)
	if err != nil {
		return LoadResult{Replaced: replaced}, err
	}
	err = d.create(ctx, &b, o.NewOptions, "hbx box load", func() error {
		if err := atomicfile.WriteFile(b.Path(PassFile), append(pass, '\n'), 0o600); err != nil {
			return err
		}
		return d.loadInto(ctx, b, o.NewOptions, tmp)
	})
	if err != nil {
		return LoadResult{Replaced: replaced}, fmt.Errorf("load box %s: %w", o.Name, err)
	}
	return LoadResult{Box: b, Took: time.Since(start), Replaced: replaced}, nil
}

// keepReplaced saves the box Load --force is about to replace with Save,
// beside the archive being loaded, as NAME-replaced-<UTC time>.tar.gz.gpg
// with its passphrase in the same name + ".pass" (mode 0600): the box's
// own backup.pass goes with its directory. It returns the archive's
// path. A box that cannot be saved (stopped, broken) is not replaced:
// the error says to start it or remove it with hbx box rm first, and the
// passphrase file is removed again.
func (d Docker) keepReplaced(ctx context.Context, o LoadOptions, old Box, now time.Time) (string, error) {
	dir, err := filepath.Abs(filepath.Dir(o.Archive))
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, o.Name+"-replaced-"+now.UTC().Format("20060102T150405Z")+".tar.gz.gpg")
	if err := checkOutside(o.Root, out); err != nil {
		return "", fmt.Errorf("load box %s --force: save the box it replaces: %w", o.Name, err)
	}
	pass, err := readPassphrase(old.Path(PassFile))
	if err != nil {
		return "", fmt.Errorf("load box %s --force: the box it replaces: %w", o.Name, err)
	}
	if err := atomicfile.WriteFile(out+".pass", append(pass, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("load box %s --force: %w", o.Name, err)
	}
	if _, err := d.Save(ctx, o.Root, o.Name, out); err != nil {
		return "", errors.Join(fmt.Errorf("load box %s --force: the box it replaces could not be saved first, so it stays (start it with hbx box start, or remove it with hbx box rm, then load again): %w", o.Name, err), os.Remove(out+".pass"))
	}
	return out, nil
}

// unpackSaved decrypts archive into dir: executor.tar.gz.gpg and
// agent.tar (the agent's entries, named workspace/...), and checks the
// archive's integrity to its end.
func unpackSaved(archive string, pass []byte, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr, rest, err := unseal(f, pass)
	if err != nil {
		return err
	}
	agent, err := os.OpenFile(filepath.Join(dir, "agent.tar"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer agent.Close()
	tw := tar.NewWriter(agent)
	seen := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		if h.Name == savedExecutor {
			seen = true
			if err := writeFrom(filepath.Join(dir, savedExecutor), tr); err != nil {
				return err
			}
			continue
		}
		if err := renameEntry(h, savedAgent, "workspace"); err != nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if _, err := io.Copy(io.Discard, rest); err != nil {
		return fmt.Errorf("archive damaged: %w", err)
	}
	if !seen {
		return fmt.Errorf("archive holds no %s: not an archive of hbx box save: %w", savedExecutor, ErrInvalid)
	}
	return errors.Join(tw.Close(), agent.Close())
}

func writeFrom(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}

// loadInto creates b's containers, copies the agent's files and the
// executor's archive into their volumes, starts the executor alone and
// has hbx restore put Executor's data back.
func (d Docker) loadInto(ctx context.Context, b Box, o NewOptions, tmp string) error {
	if err := d.createContainers(ctx, b, o); err != nil {
		return err
	}
	agent, err := d.container(ctx, b, "agent")
	if err != nil {
		return err
	}
	exe, err := d.container(ctx, b, "executor")
	if err != nil {
		return err
	}
	err = d.copyIn(ctx, agent, "/", func(tw *tar.Writer) error {
		f, err := os.Open(filepath.Join(tmp, "agent.tar"))
		if err != nil {
			return err
		}
		defer f.Close()
		return copyEntries(tw, tar.NewReader(f), "workspace", "workspace")
	})
	if err != nil {
		return err
	}
	name := "executor-" + time.Now().UTC().Format("20060102T150405Z") + ".tar.gz.gpg"
	if err := d.copyIn(ctx, exe, "/", func(tw *tar.Writer) error { return archiveEntries(tw, filepath.Join(tmp, savedExecutor), name) }); err != nil {
		return err
	}
	if _, err := d.upWait(ctx, b, o.Wait, "executor"); err != nil {
		return err
	}
	_, err = d.Compose(ctx, b, "exec", "-T", "executor", "hbx", "restore", "/backup/executor/"+name)
	return err
}

// archiveEntries writes backup/ and backup/executor/ (root, 0700) and
// the file at src as backup/executor/name (root, 0600).
func archiveEntries(tw *tar.Writer, src, name string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	now := time.Now()
	for _, dir := range []string{"backup/", "backup/executor/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o700, ModTime: now}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "backup/executor/" + name, Mode: 0o600, Size: st.Size(), ModTime: now}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}
