// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hermesbox/hbx/deploy"
	"github.com/hermesbox/hbx/internal/atomicfile"
)

// NewOptions are the inputs of New.
type NewOptions struct {
	Root          string        // the box root (DefaultRoot)
	Name          string        // a DNS label (ValidateName)
	Port          int           // the host port; 0: ChoosePort
	BindAddress   string        // BIND_ADDRESS; "" is 127.0.0.1
	ExecutorImage string        // EXECUTOR_IMAGE; "" is compose.yaml's default
	AgentImage    string        // AGENT_IMAGE (required)
	Set           []Var         // more .env variables (HEALTH_INTERVAL=2s ...)
	Override      []byte        // compose.override.yaml; nil: none
	ConfigDir     string        // copied into the executor's /etc/hbx before its first start; "": the image's
	Wait          time.Duration // bound of `up --wait`; 0 is 5 minutes
	BootWindow    time.Duration // the doctor's host probe retries this long

	portChosen bool // Port was 0: checkNew chose it, claimPort may again
}

// NewResult is what New made.
type NewResult struct {
	Box    Box
	Up     time.Duration // `up --wait`
	Ready  time.Duration // from the start of New to a green doctor
	Report Report
}

// DoctorError is New's failure when the box came up but its doctor is red.
type DoctorError struct{ Report Report }

func (e *DoctorError) Error() string { return "doctor: " + e.Report.FirstFailure() }

// New makes the box directory, mints the key and passphrase, starts the
// box (`up --wait`, bounded) and runs its doctor. Bad input is refused
// before anything exists; any later failure removes the project's
// containers, networks and volumes and the box directory.
func (d Docker) New(ctx context.Context, o NewOptions) (res NewResult, err error) {
	start := time.Now()
	b, err := d.checkNew(ctx, &o)
	if err != nil {
		return res, err
	}
	err = d.create(ctx, &b, o, "hbx box new", func() error {
		if res.Up, err = d.firstUp(ctx, b, o); err != nil {
			return err
		}
		res.Report = d.Doctor(ctx, b, o.BootWindow)
		if !res.Report.OK() {
			return &DoctorError{res.Report}
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("new box %s: %w", o.Name, err)
	}
	res.Box, res.Ready = b, time.Since(start)
	return res, nil
}

// create makes b's directory (and the root), holds its lock, writes its
// files and runs fill; when anything fails it removes the project and
// the directory (and the root when it made it). The port is claimed
// under the root's flock (claimPort): a second New in the root waits
// until this one's .env names its port.
func (d Docker) create(ctx context.Context, b *Box, o NewOptions, command string, fill func() error) (err error) {
	rootMade := false
	if _, serr := os.Stat(o.Root); errors.Is(serr, os.ErrNotExist) {
		rootMade = true
	}
	if err := os.MkdirAll(o.Root, 0o700); err != nil {
		return err
	}
	defer func() {
		if err != nil && rootMade {
			_ = os.Remove(o.Root) // fails, as it should, unless empty
		}
	}()
	unlockRoot, err := lockRoot(ctx, o.Root)
	if err != nil {
		return err
	}
	defer unlockRoot()
	if err := claimPort(b, o); err != nil {
		return err
	}
	if err := os.Mkdir(b.Dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			err = fmt.Errorf("box %s exists in %s: %w", o.Name, o.Root, ErrInvalid)
		}
		return err
	}
	defer func() {
		if err != nil {
			d.undoNew(*b, o.Root, rootMade)
		}
	}()
	l, err := lockBox(ctx, *b, command)
	if err != nil {
		return err
	}
	defer l.Unlock()
	if err := writeBox(*b, o); err != nil {
		return err
	}
	unlockRoot()
	return fill()
}

// checkNew validates o and fills its defaults; nothing is created.
func (d Docker) checkNew(ctx context.Context, o *NewOptions) (Box, error) {
	if err := ValidateName(o.Name); err != nil {
		return Box{}, err
	}
	if o.AgentImage == "" {
		return Box{}, fmt.Errorf("new box %s: no agent image (--agent-image): %w", o.Name, ErrInvalid)
	}
	if o.BindAddress == "" {
		o.BindAddress = "127.0.0.1"
	}
	if net.ParseIP(o.BindAddress) == nil {
		return Box{}, fmt.Errorf("new box %s: bind address %q: want an IP address such as 127.0.0.1 or ::1 (Compose publishes the port on an address, not a name): %w", o.Name, o.BindAddress, ErrInvalid)
	}
	if o.Wait <= 0 {
		o.Wait = 5 * time.Minute
	}
	if err := checkTrusted("box root", o.Root); err != nil {
		return Box{}, err
	}
	b := Box{Name: o.Name, Dir: filepath.Join(o.Root, o.Name)}
	if _, err := os.Lstat(b.Dir); err == nil {
		return Box{}, fmt.Errorf("box %s exists in %s: %w", o.Name, o.Root, ErrInvalid)
	}
	if o.ConfigDir != "" {
		if st, err := os.Stat(o.ConfigDir); err != nil || !st.IsDir() {
			return Box{}, fmt.Errorf("new box %s: config directory %s: not a directory: %w", o.Name, o.ConfigDir, ErrInvalid)
		}
	}
	others, err := List(o.Root)
	if err != nil {
		return Box{}, err
	}
	if o.Port == 0 {
		o.portChosen = true
		o.Port, err = ChoosePort(o.BindAddress, others)
	} else {
		err = CheckPort(o.BindAddress, o.Port, others)
	}
	if err != nil {
		return Box{}, fmt.Errorf("new box %s: %w", o.Name, err)
	}
	if b.Env, err = newEnv(b, *o); err != nil {
		return Box{}, err
	}
	return b, d.checkProject(ctx, b)
}

// newEnv is the .env of new box b from o (ports chosen): refused, wrapping
// ErrInvalid, when a --set is one CheckSetVar refuses or a value is one
// .env cannot hold (ValidateVar).
func newEnv(b Box, o NewOptions) (Env, error) {
	e := Env{{"BOX", o.Name}, {"HOST_PORT", strconv.Itoa(o.Port)}, {"BIND_ADDRESS", o.BindAddress}}
	if o.ExecutorImage != "" {
		e = e.Set("EXECUTOR_IMAGE", o.ExecutorImage)
	}
	e = e.Set("AGENT_IMAGE", o.AgentImage)
	e = e.Set("MCP_KEY_FILE", b.Path(KeyFile))
	e = e.Set("BACKUP_PASSPHRASE_FILE", b.Path(PassFile))
	for _, v := range o.Set {
		if err := ValidateVar(v); err != nil {
			return nil, err
		}
		if err := CheckSetVar(v); err != nil {
			return nil, err
		}
		e = e.Set(v.Key, v.Value)
	}
	for _, v := range e {
		if err := ValidateVar(v); err != nil {
			return nil, fmt.Errorf("new box %s: %w", o.Name, err)
		}
	}
	return e, nil
}

// checkProject refuses a name whose Compose project has containers or
// volumes already (a box of another root, or made by hand).
func (d Docker) checkProject(ctx context.Context, b Box) error {
	filter := "label=com.docker.compose.project=" + b.Project()
	for _, what := range []string{"container", "volume"} {
		args := []string{what, "ls", "-q", "--filter", filter}
		if what == "container" {
			args = []string{"ps", "-a", "-q", "--filter", filter}
		}
		out, err := d.Run(ctx, args...)
		if err != nil {
			return fmt.Errorf("new box %s: %w", b.Name, err)
		}
		if strings.TrimSpace(out) != "" {
			return fmt.Errorf("box %s: Compose project %s has %ss already (docker %s): %w", b.Name, b.Project(), what, strings.Join(args, " "), ErrInvalid)
		}
	}
	return nil
}

// writeBox writes the files of a new box directory.
func writeBox(b Box, o NewOptions) error {
	envData, err := b.Env.Format(fmt.Sprintf("Box %s, written by hbx box new: the variables of compose.yaml.\nThe variables here win over the shell's in hbx box; docker compose run\nby hand in this directory reads them too (unless the shell sets them).", b.Name))
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{ComposeFile, deploy.Compose, 0o644},
		{EnvFile, envData, 0o600},
	}
	if o.Override != nil {
		files = append(files, struct {
			name string
			data []byte
			mode os.FileMode
		}{OverrideFile, o.Override, 0o644})
	}
	for _, f := range files {
		if err := atomicfile.WriteFile(b.Path(f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	for _, name := range []string{KeyFile, PassFile} {
		if err := writeSecret(b.Path(name)); err != nil {
			return err
		}
	}
	return nil
}

// writeSecret writes 256 random bits, hex, one line, mode 0600.
func writeSecret(path string) error {
	s, err := mintSecret()
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, []byte(s+"\n"), 0o600)
}

func mintSecret() (string, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return "", fmt.Errorf("mint a secret: %w", err)
	}
	return hex.EncodeToString(k), nil
}

// firstUp creates the containers and starts the box with `up --wait`,
// bounded by o.Wait.
func (d Docker) firstUp(ctx context.Context, b Box, o NewOptions) (time.Duration, error) {
	if err := d.createContainers(ctx, b, o); err != nil {
		return 0, err
	}
	return d.upWait(ctx, b, o.Wait)
}

// createContainers runs `up --no-start` and copies ConfigDir into the
// executor's config volume.
func (d Docker) createContainers(ctx context.Context, b Box, o NewOptions) error {
	if _, err := d.Compose(ctx, b, "up", "--no-start"); err != nil {
		return err
	}
	if o.ConfigDir == "" {
		return nil
	}
	id, err := d.container(ctx, b, "executor")
	if err != nil {
		return err
	}
	_, err = d.Run(ctx, "cp", filepath.Clean(o.ConfigDir)+"/.", id+":/etc/hbx/")
	return err
}

// upWait runs `up -d --wait` bounded by wait (Compose's --wait-timeout,
// and a deadline on the command itself: a dependency's health condition
// holds `up` before --wait applies).
func (d Docker) upWait(ctx context.Context, b Box, wait time.Duration, extra ...string) (time.Duration, error) {
	start := time.Now()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, wait+15*time.Second)
	defer cancel()
	args := append([]string{"up", "-d", "--wait", "--wait-timeout", strconv.Itoa(int(wait.Seconds()))}, extra...)
	if _, err := d.Compose(ctx, b, args...); err != nil {
		if parent.Err() != nil {
			return 0, fmt.Errorf("start box %s: interrupted: %w", b.Name, err)
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("start box %s: not healthy within %v (hbx box logs %s executor says why): %w", b.Name, wait, b.Name, err)
		}
		return 0, err
	}
	return time.Since(start), nil
}

// container is the id of service's container, running or not.
func (d Docker) container(ctx context.Context, b Box, service string) (string, error) {
	out, err := d.Compose(ctx, b, "ps", "-a", "-q", service)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(out)
	if id == "" || strings.Contains(id, "\n") {
		return "", fmt.Errorf("box %s: want one %s container, have %q", b.Name, service, id)
	}
	return id, nil
}

// undoNew removes what a failed New made: the project (containers,
// networks, volumes), the box directory, and the root when New made it.
func (d Docker) undoNew(b Box, root string, rootMade bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := os.Stat(b.Path(ComposeFile)); err == nil {
		_, _ = d.Compose(ctx, b, "down", "-v", "--remove-orphans", "--timeout", "10")
	}
	_ = os.RemoveAll(b.Dir)
	if rootMade {
		_ = os.Remove(root)
	}
}
