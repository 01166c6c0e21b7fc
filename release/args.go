package release

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultHostPath is the host's part of the payload's PATH, after the
// image's PATH entries mapped into the rootfs: the standard system
// directories, root's on every distribution hbx targets. The native run
// uses it (never the caller's PATH) and install validation follows the
// entry program through it.
const DefaultHostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ErrArg: an argument of the image's Entrypoint/Cmd names an absolute path
// that maps nowhere hbx allows (see [CheckArgs]).
var ErrArg = errors.New("argument names a host path outside the release, data and state directories")

// WritableDirs are the image directories the payload may write besides its
// volumes. An argument under one of them maps into [StateRoot] under the
// state directory: /run/x.pid becomes <state_dir>/root/run/x.pid.
var WritableDirs = []string{"/run", "/tmp", "/var"}

// StateRoot is the state directory's subdirectory that stands for the
// image's [WritableDirs].
const StateRoot = "root"

// StreamPaths pass verbatim: they name the payload's own standard streams
// or the null device, never a file of the host.
var StreamPaths = []string{"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr"}

// ArgKind says where a mapped argument points.
type ArgKind int

const (
	ArgVerbatim ArgKind = iota // not a path, or a stream path
	ArgData                    // under a declared volume: the data directory
	ArgState                   // under a WritableDirs entry: the state directory
	ArgRelease                 // exists in the release: the rootfs (read-only)
)

// MapArg maps one argument of the image's command to the host. An absolute
// path "/p", or the value of "--flag=/p" (any argument starting with "-"
// whose text after the first "=" is absolute), is mapped, in this order:
// a stream path passes verbatim; under a declared volume to dataDir; under
// one of WritableDirs to stateDir/root/<path>; a path that exists in the
// release to its host path in the rootfs. Anything else wraps ErrArg.
// It returns the mapped argument and, for ArgState, the host path.
func MapArg(inst *Installed, arg, dataDir, stateDir string) (string, ArgKind, string, error) {
	prefix, p := "", arg
	if strings.HasPrefix(arg, "-") {
		k, v, ok := strings.Cut(arg, "=")
		if !ok || !path.IsAbs(v) {
			return arg, ArgVerbatim, "", nil
		}
		prefix, p = k+"=", v
	}
	if !path.IsAbs(p) {
		return arg, ArgVerbatim, "", nil
	}
	clean := path.Clean(p)
	if slices.Contains(StreamPaths, clean) {
		return arg, ArgVerbatim, "", nil
	}
	if host, kind, ok := mapLexical(inst, clean, dataDir, stateDir); ok {
		return prefix + host, kind, host, nil
	}
	// In the release: where it leads inside the rootfs (chroot semantics),
	// as far as it exists. A symlink of the image that leads under a
	// volume or a writable directory (/app/data -> /data, /app/pid ->
	// /run/app.pid) maps as that path would: the rootfs's own /data or
	// /run is read-only and not what the payload meant.
	img, exists, err := resolveImage(inst.Rootfs(), clean)
	if err != nil {
		return "", 0, "", fmt.Errorf("%w: %q: resolve %s in the release: %w", ErrArg, arg, Shown(clean), err)
	}
	if img != clean {
		if host, kind, ok := mapLexical(inst, img, dataDir, stateDir); ok {
			return prefix + host, kind, host, nil
		}
	}
	if exists {
		host, _, err := ResolveInRoot(inst.Rootfs(), clean)
		if err != nil {
			return "", 0, "", fmt.Errorf("%w: %q: resolve %s in the release: %w", ErrArg, arg, Shown(clean), err)
		}
		return prefix + host, ArgRelease, host, nil
	}
	return "", 0, "", fmt.Errorf("%w: %q names %s, which is not under a volume (%s), a writable directory (%s) or in the release",
		ErrArg, arg, Shown(clean), Shown(strings.Join(inst.Meta.Config.Volumes, ", ")), strings.Join(WritableDirs, ", "))
}

// mapLexical applies the volume and writable-directory rules to the clean
// image path p.
func mapLexical(inst *Installed, p, dataDir, stateDir string) (string, ArgKind, bool) {
	for _, v := range inst.Meta.Config.Volumes {
		v = path.Clean(v)
		if under(p, v) {
			return filepath.Join(dataDir, strings.TrimPrefix(p, v)), ArgData, true
		}
	}
	for _, w := range WritableDirs {
		if under(p, w) {
			return filepath.Join(stateDir, StateRoot, p), ArgState, true
		}
	}
	return "", 0, false
}

// resolveImage resolves the clean image path p inside rootfs as a chroot
// would, as far as it exists, dangling symlinks included (their targets
// need not exist): the image path p leads to. exists says whether all of
// it exists.
func resolveImage(rootfs, p string) (img string, exists bool, err error) {
	real, err := filepath.EvalSymlinks(rootfs)
	if err != nil {
		return "", false, fmt.Errorf("locate rootfs: %w", err)
	}
	for range 40 {
		next, done, exists, err := resolveStep(rootfs, real, p)
		if err != nil || done {
			return next, exists, err
		}
		p = next
	}
	return "", false, fmt.Errorf("%s: too many levels of symbolic links", p)
}

// resolveStep resolves the longest existing prefix of p. When the first
// missing component is a dangling symlink, it returns the path through its
// target to resolve next (done false).
func resolveStep(rootfs, real, p string) (next string, done, exists bool, err error) {
	rest := ""
	for cur := p; ; cur = path.Dir(cur) {
		host, _, err := ResolveInRoot(rootfs, cur)
		if err == nil {
			dir := path.Join("/", strings.TrimPrefix(strings.TrimPrefix(host, real), "/"))
			if rest == "" {
				return dir, true, true, nil
			}
			first, more, _ := strings.Cut(rest, "/")
			target, lerr := os.Readlink(filepath.Join(host, first))
			if lerr != nil { // missing, not a link
				return path.Join(dir, rest), true, false, nil
			}
			if path.IsAbs(target) {
				dir = "/"
			}
			return path.Join(dir, target, more), false, false, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", true, false, err
		}
		if cur == "/" {
			return p, true, false, nil
		}
		rest = path.Join(path.Base(cur), rest)
	}
}

// under reports whether the clean absolute path p is dir or below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// CheckArgs checks that every argument of inst's command (Entrypoint and
// Cmd after the program) maps to the release, the data directory or the
// state directory by the rule of [MapArg], the one launch.Prepare applies;
// the installer runs it before activating a release. The error wraps ErrArg and quotes the argument.
func CheckArgs(inst *Installed) error {
	prog, err := inst.Program()
	if err != nil {
		return err
	}
	for _, a := range prog.Args[1:] {
		if _, _, _, err := MapArg(inst, a, "/data", "/state"); err != nil {
			return err
		}
	}
	return nil
}
