// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/atomicfile"
)

// SaveResult is what Save wrote.
type SaveResult struct {
	Path string
	Took time.Duration
}

// Save writes one archive at out (mode 0600, atomically): gpg-readable
// (`gpg -d | tar -xz` with the box's backup.pass) like hbx backup's,
// holding executor.tar.gz.gpg (a cold hbx backup of Executor's data, taken
// in the executor: hbx restore reads it) and agent/ (the agent's volume,
// copied while the agent is stopped). The agent is started again after,
// whether the save worked or not.
func (d Docker) Save(ctx context.Context, root, name, out string) (SaveResult, error) {
	res := SaveResult{Path: out}
	if err := checkOutside(root, out); err != nil {
		return res, fmt.Errorf("save box %s: %w", name, err)
	}
	took, err := d.locked(ctx, root, name, "hbx box save", func(b Box) error {
		pass, err := readPassphrase(b.Path(PassFile))
		if err != nil {
			return err
		}
		exe, err := d.container(ctx, b, "executor")
		if err != nil {
			return err
		}
		agent, err := d.container(ctx, b, "agent")
		if err != nil {
			return err
		}
		if _, err := d.Compose(ctx, b, "exec", "-T", "executor", "hbx", "backup"); err != nil {
			return err
		}
		latest, err := d.Compose(ctx, b, "exec", "-T", "executor", "sh", "-c", "ls -t /backup/executor/*.tar.gz.gpg | head -n 1")
		if err != nil {
			return err
		}
		if _, err := d.Compose(ctx, b, "stop", "agent"); err != nil {
			return err
		}
		err = atomicfile.Write(out, 0o600, func(w io.Writer) error {
			return d.writeSaved(ctx, w, pass, exe, strings.TrimSpace(latest), agent)
		})
		_, serr := d.Compose(ctx, b, "start", "agent")
		return errors.Join(err, serr)
	})
	res.Took = took
	if err != nil {
		return res, fmt.Errorf("save box %s: %w", name, err)
	}
	return res, nil
}

// checkOutside refuses an output path under the box root, as written or
// with its directory's symlinks resolved: hbx box rm, which a save often
// precedes, deletes the box directory with whatever is in it. Errors wrap
// ErrInvalid.
func checkOutside(root, out string) error {
	dir, err := filepath.Abs(filepath.Dir(out))
	if err != nil {
		return err
	}
	dirs := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dirs = append(dirs, real)
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	roots := []string{absRoot}
	if real, err := filepath.EvalSymlinks(root); err == nil {
		roots = append(roots, real)
	}
	for _, d := range dirs {
		for _, r := range roots {
			if d == r || strings.HasPrefix(d, r+string(filepath.Separator)) {
				return fmt.Errorf("output %s is in the box root %s, where hbx box rm would delete it with the box: write it elsewhere (-o): %w", out, root, ErrInvalid)
			}
		}
	}
	return nil
}

// writeSaved writes the sealed archive: the executor's archive, then the
// agent's /workspace as agent/.
func (d Docker) writeSaved(ctx context.Context, w io.Writer, pass []byte, exe, exeArchive, agent string) error {
	sw, err := seal(w, pass)
	if err != nil {
		return err
	}
	err = d.copyOut(ctx, exe, exeArchive, func(tr *tar.Reader) error {
		return copyEntries(sw.Writer, tr, path.Base(exeArchive), savedExecutor)
	})
	if err != nil {
		return err
	}
	err = d.copyOut(ctx, agent, "/workspace", func(tr *tar.Reader) error {
		return copyEntries(sw.Writer, tr, "workspace", savedAgent)
	})
	if err != nil {
		return err
	}
	return sw.Close()
}
