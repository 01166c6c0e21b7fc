// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/atomicfile"
)

// ConfigPath is the executor's configuration file inside its container
// (deploy/Dockerfile's HBX_CONFIG, on the box's config volume).
const ConfigPath = "/etc/hbx/hbx.yaml"

// ConfigBeforeEdit is the file in a box directory that holds the
// executor's configuration as it was before the last EditConfig that
// changed it (mode 0600).
const ConfigBeforeEdit = "hbx.yaml.before-edit"

// configCandidate is where EditConfig puts an edited file to be checked:
// the same directory (the same volume) as ConfigPath, so the switch is
// one rename.
const configCandidate = "/etc/hbx/.hbx.yaml.edit"

// Config returns the executor's configuration file of box name, read
// from its container (running or stopped) with `docker compose cp`.
func (d Docker) Config(ctx context.Context, root, name string) ([]byte, error) {
	b, err := Open(root, name)
	if err != nil {
		return nil, err
	}
	return d.readConfig(ctx, b)
}

// readConfig copies ConfigPath out of b's executor into a private
// temporary directory and returns its bytes.
func (d Docker) readConfig(ctx context.Context, b Box) ([]byte, error) {
	dir, err := os.MkdirTemp("", "hbx-box-config-")
	if err != nil {
		return nil, fmt.Errorf("read the config of box %s: %w", b.Name, err)
	}
	defer os.RemoveAll(dir)
	local := filepath.Join(dir, "hbx.yaml")
	if _, err := d.Compose(ctx, b, "cp", "executor:"+ConfigPath, local); err != nil {
		return nil, fmt.Errorf("read the config of box %s: %w", b.Name, err)
	}
	return os.ReadFile(local)
}

// ConfigEdit is what EditConfig did.
type ConfigEdit struct {
	Changed bool          // false: the editor left the file as it was, nothing was written
	Took    time.Duration // check, switch and restart to healthy
}

// EditConfig changes the executor's configuration file of box name
// without `compose cp` round trips: under the box's lock it copies the
// file out to a private temporary file, runs edit on that path (the
// command runs $EDITOR), and when the bytes changed copies the result
// next to ConfigPath, has the executor's own hbx check it (`hbx --config
// CANDIDATE config show`: the same rules hbx supervise applies, with the
// container's paths and users), switches it in with one rename inside
// the volume and restarts the executor, waiting up to wait for health.
// The file as it was is kept in the box directory as ConfigBeforeEdit
// before the switch, and a failure after it names that file.
//
// The executor must be running (a FATAL executor is: hbx stays PID 1);
// otherwise it fails before edit runs. A candidate hbx refuses is
// removed and the error, ErrInvalid, ends with hbx's own line; the file
// in force is then unchanged. Nothing is written when the file is
// unchanged or edit fails.
func (d Docker) EditConfig(ctx context.Context, root, name string, edit func(path string) error, wait time.Duration) (ConfigEdit, error) {
	var res ConfigEdit
	if wait <= 0 {
		wait = 5 * time.Minute
	}
	_, err := d.locked(ctx, root, name, "hbx box config --edit", func(b Box) error {
		if err := d.executorRunning(ctx, b); err != nil {
			return err
		}
		old, err := d.readConfig(ctx, b)
		if err != nil {
			return err
		}
		edited, err := editCopy(old, edit)
		if err != nil || bytes.Equal(edited, old) {
			return err
		}
		res.Changed = true
		start := time.Now()
		// The file as it was stays in the box directory: a config hbx
		// accepts may still not come up healthy (a pin it cannot pull).
		before := b.Path(ConfigBeforeEdit)
		if err := atomicfile.WriteFile(before, old, 0o600); err != nil {
			return fmt.Errorf("edit the config of box %s: keep the file as it was: %w", b.Name, err)
		}
		if err := d.switchConfig(ctx, b, edited); err != nil {
			return err
		}
		if _, err := d.Compose(ctx, b, "restart", "executor"); err != nil {
			return fmt.Errorf("restart the executor of box %s after its config changed (the file before the edit: %s): %w", b.Name, before, err)
		}
		if _, err := d.upWait(ctx, b, wait); err != nil {
			return fmt.Errorf("edited config of box %s in force, the file before the edit in %s: %w", b.Name, before, err)
		}
		res.Took = time.Since(start)
		return nil
	})
	return res, err
}

// executorRunning fails unless b's executor container is running.
func (d Docker) executorRunning(ctx context.Context, b Box) error {
	svcs, err := d.Services(ctx, b)
	if err != nil {
		return err
	}
	if s := svcs["executor"]; s.State != "running" {
		return fmt.Errorf("edit the config of box %s: its executor is %s, not running (hbx box start %s): %w", b.Name, orNone(s.State), b.Name, ErrInvalid)
	}
	return nil
}

// orNone is s, or "absent" when empty.
func orNone(s string) string {
	if s == "" {
		return "absent"
	}
	return s
}

// editCopy writes old to a private temporary file, runs edit on it and
// returns what the file then holds.
func editCopy(old []byte, edit func(path string) error) ([]byte, error) {
	dir, err := os.MkdirTemp("", "hbx-box-config-")
	if err != nil {
		return nil, fmt.Errorf("edit the box config: %w", err)
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "hbx.yaml")
	if err := os.WriteFile(p, old, 0o600); err != nil {
		return nil, fmt.Errorf("edit the box config: %w", err)
	}
	if err := edit(p); err != nil {
		return nil, fmt.Errorf("edit the box config: %w (nothing changed)", err)
	}
	return os.ReadFile(p)
}

// switchConfig copies data into the executor as configCandidate (mode
// 0644, as the image's own file), has hbx check it, and renames it over
// ConfigPath; a refused candidate is removed.
func (d Docker) switchConfig(ctx context.Context, b Box, data []byte) error {
	dir, err := os.MkdirTemp("", "hbx-box-config-")
	if err != nil {
		return fmt.Errorf("edit the config of box %s: %w", b.Name, err)
	}
	defer os.RemoveAll(dir)
	local := filepath.Join(dir, filepath.Base(configCandidate))
	if err := os.WriteFile(local, data, 0o644); err != nil {
		return fmt.Errorf("edit the config of box %s: %w", b.Name, err)
	}
	if err := os.Chmod(local, 0o644); err != nil { // past the umask
		return fmt.Errorf("edit the config of box %s: %w", b.Name, err)
	}
	if _, err := d.Compose(ctx, b, "cp", local, "executor:"+configCandidate); err != nil {
		return fmt.Errorf("edit the config of box %s: %w", b.Name, err)
	}
	// docker cp makes the file root's in the container; the check below
	// refuses it otherwise (hbx's trusted-path rule), as it would at start.
	if _, err := d.Compose(ctx, b, "exec", "-T", "executor", "hbx", "--config", configCandidate, "config", "show"); err != nil {
		d.dropCandidate(b)
		return fmt.Errorf("edit the config of box %s: hbx refuses the edited file, the one in force is unchanged: %w: %w", b.Name, err, ErrInvalid)
	}
	if _, err := d.Compose(ctx, b, "exec", "-T", "executor", "mv", "-f", configCandidate, ConfigPath); err != nil {
		d.dropCandidate(b)
		return fmt.Errorf("edit the config of box %s: switch it in: %w", b.Name, err)
	}
	return nil
}

// dropCandidate removes a candidate that will not be switched in.
func (d Docker) dropCandidate(b Box) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = d.Compose(ctx, b, "exec", "-T", "executor", "rm", "-f", configCandidate)
}

// EditorCommand is the argv that runs the operator's editor on path:
// $VISUAL, else $EDITOR, else vi, through sh so a value with arguments
// ("code --wait") works as it does for git.
func EditorCommand(getenv func(string) string, path string) []string {
	ed := strings.TrimSpace(getenv("VISUAL"))
	if ed == "" {
		ed = strings.TrimSpace(getenv("EDITOR"))
	}
	if ed == "" {
		ed = "vi"
	}
	return []string{"sh", "-c", ed + ` "$1"`, "sh", path}
}
