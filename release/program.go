package release

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"
)

// DefaultPath is the PATH a container runtime uses when the image sets none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Program is the image's command line mapped onto the host: what running the
// payload natively needs.
type Program struct {
	Path     string   // host path of the executable, resolved inside the rootfs
	Args     []string // argv as the image gives it (Entrypoint + Cmd); Args[0] unmapped
	Dir      string   // host path of WorkingDir inside the rootfs
	PathDirs []string // host paths of the image's PATH entries that exist in the rootfs, in order
	Env      []string // the image's Env, unmodified
}

// ImageEnv returns the value of key in an image Env list ("K=V" strings).
func ImageEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Program resolves the release's entry program, working directory and PATH
// inside its rootfs (chroot semantics). Errors wrap ErrCorrupt and name what
// is missing: no Entrypoint/Cmd, a WorkingDir that is not a directory, a
// program not found on the image's PATH or not an executable regular file.
// It costs a few stat calls and reads no file content.
func (i *Installed) Program() (*Program, error) {
	argv := i.Meta.Config.Argv()
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%w: image config has no Entrypoint or Cmd", ErrCorrupt)
	}
	p, err := i.Resolve(argv)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return p, nil
}

// Resolve maps argv (a command line as the image would run it) onto the
// release the way [Installed.Program] maps the entry program: argv[0]
// through the image's PATH inside the rootfs, in the image's WorkingDir.
// Its errors name the rule broken and do not wrap ErrCorrupt: a command
// the image cannot run says nothing about the bytes on disk.
func (i *Installed) Resolve(argv []string) (*Program, error) {
	cfg := i.Meta.Config
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("empty command")
	}
	rootfs := i.Rootfs()
	wd := cfg.WorkingDir
	if wd == "" {
		wd = "/"
	}
	dir, st, err := ResolveInRoot(rootfs, wd)
	if err != nil {
		return nil, fmt.Errorf("working directory %q: %w", wd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("working directory %q is not a directory", wd)
	}
	imgPath, ok := ImageEnv(cfg.Env, "PATH")
	if !ok {
		imgPath = DefaultPath
	}
	p := &Program{Args: append([]string(nil), argv...), Dir: dir, Env: cfg.Env, PathDirs: pathDirs(rootfs, imgPath)}
	host, err := findProgram(rootfs, wd, imgPath, argv[0])
	if err != nil {
		return nil, err
	}
	p.Path = host
	return p, nil
}

// pathDirs is the host path of each absolute directory of the image's
// PATH imgPath that exists in rootfs; a relative entry means nothing
// without a cwd convention.
func pathDirs(rootfs, imgPath string) []string {
	var dirs []string
	for _, d := range filepath.SplitList(imgPath) {
		if !path.IsAbs(d) {
			continue
		}
		host, st, err := ResolveInRoot(rootfs, d)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			dirs = append(dirs, host)
		}
	}
	return dirs
}

// findProgram returns the host path of the executable regular file name
// names inside rootfs: name itself when absolute, relative to wd when it
// holds a slash, else the first match on the image's PATH imgPath.
func findProgram(rootfs, wd, imgPath, name string) (string, error) {
	var candidates []string
	switch {
	case path.IsAbs(name):
		candidates = []string{name}
	case strings.Contains(name, "/"):
		candidates = []string{path.Join(wd, name)}
	default:
		for _, d := range filepath.SplitList(imgPath) {
			if path.IsAbs(d) {
				candidates = append(candidates, path.Join(d, name))
			}
		}
	}
	var lastErr error = fmt.Errorf("not found on the image's PATH %q", imgPath)
	for _, c := range candidates {
		host, st, err := ResolveInRoot(rootfs, c)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				lastErr = err
			}
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0 {
			lastErr = fmt.Errorf("%s is not an executable file", Shown(c))
			continue
		}
		return host, nil
	}
	return "", fmt.Errorf("program %q: %w", name, lastErr)
}

// ResolveInRoot resolves the image path p inside rootfs with chroot
// semantics (symlinks, absolute ones too, stay inside rootfs) and returns
// the host path it names and its stat. Missing paths wrap os.ErrNotExist.
func ResolveInRoot(rootfs, p string) (string, unix.Stat_t, error) {
	var st unix.Stat_t
	h, err := pathrs.OpenInRoot(rootfs, p)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return "", st, fmt.Errorf("%s: %w", Shown(p), os.ErrNotExist)
		}
		// The library's error repeats p verbatim: keep its errno only.
		var errno unix.Errno
		if errors.As(err, &errno) {
			return "", st, fmt.Errorf("resolve %s: %w", Shown(p), errno)
		}
		return "", st, fmt.Errorf("resolve %s: %w", Shown(p), err)
	}
	defer h.Close()
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return "", st, fmt.Errorf("stat %s: %w", Shown(p), err)
	}
	host, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(h.Fd())))
	if err != nil {
		return "", st, fmt.Errorf("locate %s: %w", Shown(p), err)
	}
	real, err := filepath.EvalSymlinks(rootfs)
	if err != nil {
		return "", st, fmt.Errorf("locate rootfs: %w", err)
	}
	if host != real && !strings.HasPrefix(host, real+"/") {
		return "", st, fmt.Errorf("resolve %s: landed outside the rootfs at %s", Shown(p), Shown(host))
	}
	return host, st, nil
}

// Shown is s as an error shows text an image chose (file names, #! lines,
// a PT_INTERP, arguments): verbatim when it is printable, else quoted, so
// that a hostile image cannot break the error's one line or send escape
// sequences to the operator's terminal.
func Shown(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			return strconv.Quote(s)
		}
	}
	return s
}
