// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/hermesbox/hbx/internal/pathtrust"
)

// RootEnv names the environment variable that overrides DefaultRoot.
const RootEnv = "HBX_BOX_ROOT"

// Files of a box directory.
const (
	ComposeFile  = "compose.yaml"
	OverrideFile = "compose.override.yaml"
	EnvFile      = ".env"
	KeyFile      = "mcp.key"
	PassFile     = "backup.pass"
	LockFile     = ".lock"
)

// DefaultRoot is where boxes live without --dir: $HBX_BOX_ROOT, else
// $XDG_DATA_HOME/hbx/boxes, else $HOME/.local/share/hbx/boxes. getenv
// reads the environment (os.Getenv in the command).
func DefaultRoot(getenv func(string) string) (string, error) {
	if r := getenv(RootEnv); r != "" {
		return filepath.Abs(r)
	}
	if x := getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "hbx", "boxes"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", fmt.Errorf("find the box root: neither %s nor HOME is set: %w", RootEnv, ErrInvalid)
	}
	return filepath.Join(home, ".local", "share", "hbx", "boxes"), nil
}

// Box is one box directory as read from disk.
type Box struct {
	Name string
	Dir  string // absolute
	Env  Env
	// Broken, set only by List, is why the directory is not a readable
	// box (its .env malformed, naming another box, or unreadable); Env
	// then holds what could be read of it.
	Broken string
}

// Project is the box's Compose project name (compose.yaml's name:).
func (b Box) Project() string { return "hbx-" + b.Name }

// Port is the box's host port (HOST_PORT), 0 when unreadable.
func (b Box) Port() int {
	p, _ := strconv.Atoi(b.Env.Get("HOST_PORT"))
	return p
}

// URL is where the host reaches the box's executor (a wildcard
// BIND_ADDRESS through its family's loopback).
func (b Box) URL() string {
	addr := b.Env.Get("BIND_ADDRESS")
	switch addr {
	case "", "0.0.0.0":
		addr = "127.0.0.1"
	case "::":
		addr = "::1"
	}
	return "http://" + net.JoinHostPort(addr, strconv.Itoa(b.Port())) + "/"
}

// Path is a file of the box directory.
func (b Box) Path(name string) string { return filepath.Join(b.Dir, name) }

// checkTrusted refuses p (a box root or box directory; what names it)
// when it or an ancestor is owned by, or writable by, a user other than
// the one running hbx box and root (pathtrust.Check, with hbx box's own
// user trusted): that user could rename a box away and put a directory
// of their own in its place, with a compose.yaml and .env that hbx box
// would run docker on. A missing path passes (New makes it). Errors wrap
// pathtrust.ErrUntrusted and ErrInvalid.
func checkTrusted(what, p string) error {
	t := pathtrust.Trust{UIDs: []uint32{uint32(os.Geteuid())}}
	if err := pathtrust.Check(what, p, false, t); err != nil {
		return fmt.Errorf("%w (%w)", err, ErrInvalid)
	}
	return nil
}

// ErrNotFound: no box of that name under the root.
var ErrNotFound = errors.New("no such box")

// Open reads the box name under root. A missing directory or .env wraps
// ErrNotFound; a box directory that another user could replace
// (checkTrusted) is refused.
func Open(root, name string) (Box, error) {
	if err := ValidateName(name); err != nil {
		return Box{}, err
	}
	b := Box{Name: name, Dir: filepath.Join(root, name)}
	if err := checkTrusted("box directory", b.Dir); err != nil {
		return Box{}, err
	}
	data, err := os.ReadFile(b.Path(EnvFile))
	if errors.Is(err, os.ErrNotExist) {
		return Box{}, fmt.Errorf("box %s: %w under %s (hbx box ls lists them)", name, ErrNotFound, root)
	}
	if err != nil {
		return Box{}, fmt.Errorf("read box %s: %w", name, err)
	}
	if b.Env, err = ParseEnv(data); err != nil {
		return Box{}, fmt.Errorf("read %s: %w", b.Path(EnvFile), err)
	}
	if got := b.Env.Get("BOX"); got != name {
		return Box{}, fmt.Errorf("read %s: BOX=%q, want %q (the directory's name): %w", b.Path(EnvFile), got, name, ErrInvalid)
	}
	return b, nil
}

// List reads every box under root, sorted by name; directories that are
// not boxes (no valid name or no .env) are skipped, and one Open refuses
// is listed with Broken set. A missing root is an
// empty list; a root that another user could write is refused
// (checkTrusted).
func List(root string) ([]Box, error) {
	if err := checkTrusted("box root", root); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list boxes: %w", err)
	}
	var out []Box
	for _, e := range ents {
		if !e.IsDir() || ValidateName(e.Name()) != nil {
			continue
		}
		b, err := Open(root, e.Name())
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			// One box copied or edited by hand must not hide the
			// others from ls, nor its port from new.
			b = Box{Name: e.Name(), Dir: filepath.Join(root, e.Name()), Broken: err.Error()}
			if data, rerr := os.ReadFile(b.Path(EnvFile)); rerr == nil {
				b.Env, _ = ParseEnv(data)
			}
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Box) int { return cmpString(a.Name, b.Name) })
	return out, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
