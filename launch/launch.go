package launch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/fsat"
	"github.com/hermesbox/hbx/internal/names"
	"github.com/hermesbox/hbx/internal/regfile"
	"github.com/hermesbox/hbx/release"
)

// ErrNotInstalled: no active release, or not the configured one. The
// message tells the operator to run hbx install.
var ErrNotInstalled = errors.New("run `hbx install` first")

// ErrEnvFile: the env file is missing, not readable, readable by others or
// malformed; the CLI maps it to invalid configuration (exit 2).
var ErrEnvFile = errors.New("bad env file")

// ErrTokenFile: executor.token_file is missing, not a regular file,
// readable by others, empty or not one key on its first line; the CLI
// maps it to invalid configuration (exit 2).
var ErrTokenFile = errors.New("bad token file")

// PidFile is the name of the pidfile in the state directory.
const PidFile = "executor.pid"

// Options describe how the payload should run. Paths are absolute.
type Options struct {
	RuntimeDir string
	DataDir    string // EXECUTOR_DATA_DIR; created 0700, owned by User
	StateDir   string // HOME, TMPDIR, XDG dirs; created 0700, owned by User
	User       string // user name or numeric uid; "" runs as the caller
	EnvFile    string // optional KEY=VALUE file, mode 0600 or stricter
	// TokenFile holds the MCP bearer key on its first line (mode 0600 or
	// stricter); TokenEnv names the variable that receives it, set last,
	// after EnvFile's. Both "" hands no key.
	TokenFile string
	TokenEnv  string

	Listen            string // loopback IP for EXECUTOR_HOST
	Port              int    // PORT
	HostPort          int    // host-side port for EXECUTOR_WEB_BASE_URL
	AllowLocalNetwork bool   // EXECUTOR_ALLOW_LOCAL_NETWORK
	DisableIPv6       bool   // BUN_FEATURE_FLAG_DISABLE_IPV6=1
	DisableTelemetry  bool   // TelemetryOff, unless the env file sets them
	// Network is executor.exposure network (the Docker box's executor
	// container, which listens on 0.0.0.0 by design): the env file may
	// then set EXECUTOR_HOST to any address. Otherwise an EXECUTOR_HOST
	// there must be a loopback IP literal (ErrEnvFile).
	Network bool

	// Target is the configured release (config.Config.Release); the
	// active one must pass its Check.
	release.Target
	// HostPath is the host's part of the payload's PATH, after the
	// rootfs dirs; "" means release.DefaultHostPath. hbx passes that,
	// never its caller's PATH: a directory there that another user can
	// write would choose the programs the payload runs.
	HostPath string
	ExtraEnv []string
}

// Spec is a prepared command: exec Path with Args in Dir with Env, as
// Credential when not nil.
type Spec struct {
	Path       string
	Args       []string
	Dir        string
	Env        []string
	Credential *syscall.Credential
	PidFile    string
	Release    *release.Installed
	// Tightened lists, one line each ("<dir>: owner 0:0 -> 1000:1000,
	// mode 0755 -> 0700"), the existing directories Prepare made 0700
	// and the user's; the caller logs them.
	Tightened []string
	// HandedOver lists, one line each ("<dir>: 12 entries root's ->
	// 998:998"), the data and state directories that were root's and
	// whose root-owned entries Prepare gave the payload's user (once: a
	// box whose Executor ran as root); the caller logs them.
	HandedOver []string
	// ExtraFiles are inherited by the payload from fd 3 on (hbx passes
	// the data directory's lock). Run does not close them.
	ExtraFiles []*os.File
	// Cgroup, when not nil, is an open cgroup v2 directory the payload
	// starts in (clone3 with CLONE_INTO_CGROUP), so every process it
	// starts is a member whatever it does; Run does not close it. Where
	// clone3 is missing, Run fails wrapping ENOSYS.
	Cgroup *os.File
	// KillAfter, when not zero, is how long after its context ends Run
	// gives the payload's process group to go after the SIGTERM before it
	// sends SIGKILL (the rehearsal's stop grace). Zero: Run waits.
	KillAfter time.Duration
}

// Prepare checks the active release against the configuration, creates the
// data and state directories, and builds the command. Nothing is started.
func Prepare(o Options) (*Spec, error) { return prepare(o, nil, nil) }

// CheckActive runs the checks of Prepare that change nothing: the env
// file and executor.token_file are read (ErrEnvFile, ErrTokenFile), and
// the active release must match o's image and have a program to run
// (ErrNotInstalled otherwise). It creates no directory, looks up no user
// and changes no owner, so a supervisor can run it before it stops a
// healthy Executor to restart it.
func CheckActive(o Options) error {
	if _, err := fileEnv(o); err != nil {
		return err
	}
	_, _, err := programOf(o, nil, nil)
	return err
}

// PrepareCommand builds argv (install.smoke_command) to run in the release
// inst, which need not be active, exactly as Prepare builds the payload's
// command: argv[0] through the image's PATH inside the rootfs, the same
// user, environment, working directory and argument mapping. It creates
// the data and state directories as Prepare does. Nothing is started.
func PrepareCommand(o Options, inst *release.Installed, argv []string) (*Spec, error) {
	return prepare(o, inst, argv)
}

func prepare(o Options, inst *release.Installed, argv []string) (*Spec, error) {
	// The env file first: a bad one is invalid configuration and changes
	// nothing on disk.
	fileEnv, err := fileEnv(o)
	if err != nil {
		return nil, err
	}
	inst, prog, err := programOf(o, inst, argv)
	if err != nil {
		return nil, err
	}
	cred, err := account.Lookup(o.User)
	if err != nil {
		return nil, fmt.Errorf("executor.user: %w", err)
	}
	handed, err := handOverDirs(o, cred)
	if err != nil {
		return nil, err
	}
	var changed []string
	dirs, err := prepareDirs(o, cred, &changed)
	if err != nil {
		return nil, err
	}
	args, err := mapArgs(o, inst, prog, cred, &changed)
	if err != nil {
		return nil, err
	}
	return &Spec{
		Path:       prog.Path,
		Args:       args,
		Dir:        prog.Dir,
		Env:        payloadEnv(o, prog, dirs, cred, fileEnv),
		Credential: cred,
		PidFile:    filepath.Join(o.StateDir, PidFile),
		Release:    inst,
		Tightened:  changed,
		HandedOver: handed,
	}, nil
}

// handOverDirs runs handOver on the data and state directories.
func handOverDirs(o Options, cred *syscall.Credential) ([]string, error) {
	var lines []string
	for _, d := range []struct{ what, path string }{{"data directory", o.DataDir}, {"state directory", o.StateDir}} {
		line, err := handOver(d.path, cred)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.what, err)
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
	return lines, nil
}

// programOf resolves argv in inst, or, without inst, the program of the
// active release, which must match o's image (ErrNotInstalled otherwise).
func programOf(o Options, inst *release.Installed, argv []string) (*release.Installed, *release.Program, error) {
	if inst != nil {
		prog, err := inst.Resolve(argv)
		return inst, prog, err
	}
	inst, err := release.Current(o.RuntimeDir)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNotInstalled, err)
	}
	if err := o.Check(inst.Meta.Target()); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNotInstalled, err)
	}
	prog, err := inst.Program()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNotInstalled, err)
	}
	return inst, prog, nil
}

// prepareDirs makes the data and state directories (and HOME, TMPDIR and
// the XDG directories inside the state directory) 0700 and cred's,
// noting each change in changed, and empties TMPDIR (what an earlier run
// left there, workerd's executor-workerd-<pid>-* directories among it,
// would otherwise pile up); dirs maps those variables to their paths.
func prepareDirs(o Options, cred *syscall.Credential, changed *[]string) (dirs map[string]string, err error) {
	if err := ensureDir(o.DataDir, cred, changed); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	dirs = map[string]string{
		"HOME":            filepath.Join(o.StateDir, "home"),
		"TMPDIR":          filepath.Join(o.StateDir, "tmp"),
		"XDG_CACHE_HOME":  filepath.Join(o.StateDir, "cache"),
		"XDG_CONFIG_HOME": filepath.Join(o.StateDir, "config"),
		"XDG_DATA_HOME":   filepath.Join(o.StateDir, "data"),
		"XDG_STATE_HOME":  filepath.Join(o.StateDir, "state"),
	}
	if err := ensureDir(o.StateDir, cred, changed); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	for _, d := range dirs {
		if err := ensureUnder(o.StateDir, filepath.Base(d), cred, changed); err != nil {
			return nil, fmt.Errorf("state directory: %w", err)
		}
	}
	if err := fsat.EmptyDir(unix.AT_FDCWD, dirs["TMPDIR"]); err != nil {
		return nil, fmt.Errorf("state directory: empty TMPDIR: %w", err)
	}
	return dirs, nil
}

// TelemetryOff are the switches that turn off what upstream Executor sends
// out by default (Options.DisableTelemetry): its npm update check, and
// from v1.5.37 its anonymous analytics (either of the last two is enough).
var TelemetryOff = []string{"EXECUTOR_DISABLE_UPDATE_CHECK=1", "EXECUTOR_DISABLE_ANALYTICS=1", "DO_NOT_TRACK=1"}

// payloadEnv is the payload's environment: the image's, then PATH, hbx's
// overrides (listen address, port, data directory, base URL, local-network
// policy, IPv6, TelemetryOff), the state directories, USER and LOGNAME,
// o.ExtraEnv and last the env file's.
func payloadEnv(o Options, prog *release.Program, dirs map[string]string, cred *syscall.Credential, fileEnv []string) []string {
	env := newEnv(prog.Env)
	hostPath := o.HostPath
	if hostPath == "" {
		hostPath = release.DefaultHostPath
	}
	env.set("PATH", strings.Join(append(append([]string(nil), prog.PathDirs...), hostPath), ":"))
	env.set("EXECUTOR_HOST", o.Listen)
	env.set("PORT", strconv.Itoa(o.Port))
	env.set("EXECUTOR_DATA_DIR", o.DataDir)
	env.set("EXECUTOR_WEB_BASE_URL", "http://"+net.JoinHostPort("localhost", strconv.Itoa(o.HostPort)))
	env.set("EXECUTOR_ALLOW_LOCAL_NETWORK", strconv.FormatBool(o.AllowLocalNetwork))
	if o.DisableIPv6 {
		env.set("BUN_FEATURE_FLAG_DISABLE_IPV6", "1")
	}
	if o.DisableTelemetry {
		for _, kv := range TelemetryOff {
			k, v, _ := strings.Cut(kv, "=")
			env.set(k, v)
		}
	}
	for k, v := range dirs {
		env.set(k, v)
	}
	if cred != nil {
		if name, ok := account.Name(int(cred.Uid)); ok {
			env.set("USER", name)
			env.set("LOGNAME", name)
		}
	}
	for _, kv := range append(append([]string(nil), o.ExtraEnv...), fileEnv...) {
		k, v, _ := strings.Cut(kv, "=")
		env.set(k, v)
	}
	return env.list()
}

// mapArgs maps the program's path arguments to the host (release.MapArg),
// creating those under the state directory.
func mapArgs(o Options, inst *release.Installed, prog *release.Program, cred *syscall.Credential, changed *[]string) ([]string, error) {
	args := append([]string(nil), prog.Args...)
	for i := 1; i < len(args); i++ {
		a, kind, host, err := release.MapArg(inst, args[i], o.DataDir, o.StateDir)
		if err != nil {
			return nil, err
		}
		if kind == release.ArgState {
			if err := ensureStatePath(o.StateDir, host, cred, changed); err != nil {
				return nil, fmt.Errorf("state directory: %w", err)
			}
		}
		args[i] = a
	}
	return args, nil
}

// ensureDir makes d a directory of mode 0700 owned by cred's user (the
// caller's effective user when cred is nil): it creates it (missing parents
// 0755, the caller's), or tightens an existing one and appends to changed a
// line saying what it changed. Only d itself changes, never what is inside:
// a recursive chown or chmod would follow links the payload (or whoever
// wrote there) planted to files elsewhere, and a 0700 directory of the
// payload's user already keeps every other user out of all below it.
// A symlink in d's place is refused.
func ensureDir(d string, cred *syscall.Credential, changed *[]string) error {
	return ensureUnder(d, "", cred, changed)
}

// ensureUnder does what ensureDir does for base, then for each directory
// from base down to base/rel (rel "" is base alone). Below base it works
// through directory descriptors (openat with O_NOFOLLOW, fchown, fchmod),
// so a payload that owns base cannot swap a component for a symlink
// between the check and the change.
func ensureUnder(base, rel string, cred *syscall.Credential, changed *[]string) error {
	if err := fsat.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return err
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if cred != nil {
		uid, gid = int(cred.Uid), int(cred.Gid)
	}
	fd, err := privateDir(unix.AT_FDCWD, base, base, uid, gid, changed)
	if err != nil {
		return err
	}
	shown := base
	for _, c := range strings.Split(rel, "/") {
		if c == "" {
			continue
		}
		shown = filepath.Join(shown, c)
		next, err := privateDir(fd, c, shown, uid, gid, changed)
		unix.Close(fd)
		if err != nil {
			return err
		}
		fd = next
	}
	return unix.Close(fd)
}

// privateDir creates name (relative to dirfd) mode 0700 when missing,
// opens it refusing a symlink, and makes it 0700 and uid:gid's through the
// descriptor, which it returns. shown names it in errors and changed.
func privateDir(dirfd int, name, shown string, uid, gid int, changed *[]string) (int, error) {
	if err := unix.Mkdirat(dirfd, name, 0o700); err != nil && err != unix.EEXIST {
		return -1, &os.PathError{Op: "mkdir", Path: shown, Err: err}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ELOOP || err == unix.ENOTDIR {
		return -1, fmt.Errorf("%s is not a directory", shown)
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: shown, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "stat", Path: shown, Err: err}
	}
	var did []string
	if int(st.Uid) != uid || int(st.Gid) != gid {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			unix.Close(fd)
			return -1, &os.PathError{Op: "chown", Path: shown, Err: err}
		}
		did = append(did, fmt.Sprintf("owner %d:%d -> %d:%d", st.Uid, st.Gid, uid, gid))
	}
	if perm := st.Mode & 0o7777; perm != 0o700 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			unix.Close(fd)
			return -1, &os.PathError{Op: "chmod", Path: shown, Err: err}
		}
		did = append(did, fmt.Sprintf("mode %04o -> 0700", perm))
	}
	if len(did) > 0 && changed != nil {
		*changed = append(*changed, shown+": "+strings.Join(did, ", "))
	}
	return fd, nil
}

// ensureStatePath creates, for an argument mapped into the state
// directory's root, each directory from <stateDir>/root down to host's
// parent (host itself too when it stands for a release.WritableDirs
// entry), mode 0700 and cred's user's.
func ensureStatePath(stateDir, host string, cred *syscall.Credential, changed *[]string) error {
	last := filepath.Dir(host)
	for _, w := range release.WritableDirs {
		if host == filepath.Join(stateDir, release.StateRoot, w) {
			last = host
		}
	}
	rel, err := filepath.Rel(stateDir, last)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("%s is not under %s", host, filepath.Join(stateDir, release.StateRoot))
	}
	return ensureUnder(stateDir, rel, cred, changed)
}

// ReadEnvFile reads KEY=VALUE lines ("#" comments and blank lines skipped)
// from path, which must not be readable or writable by group or others.
// "" reads nothing. Errors wrap ErrEnvFile and never quote a value.
func ReadEnvFile(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	b, perm, err := regfile.ReadPrivate(p, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("%w: executor.env_file: %w", ErrEnvFile, err)
	}
	if perm&0o077 != 0 {
		return nil, fmt.Errorf("%w: executor.env_file %s has mode %04o: it holds secrets and must be 0600 or stricter", ErrEnvFile, p, perm)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !names.EnvVar(k) {
			return nil, fmt.Errorf("%w: executor.env_file %s line %d: want KEY=VALUE", ErrEnvFile, p, n)
		}
		if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
			v = v[1 : len(v)-1]
		}
		out = append(out, k+"="+v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: executor.env_file %s: %w", ErrEnvFile, p, err)
	}
	return out, nil
}

// fileEnv returns the variables of o.EnvFile, then o.TokenEnv set to the
// key of o.TokenFile when one is set.
func fileEnv(o Options) ([]string, error) {
	env, err := ReadEnvFile(o.EnvFile)
	if err == nil && !o.Network {
		err = checkEnvHost(o.EnvFile, env)
	}
	if err != nil || o.TokenFile == "" {
		return env, err
	}
	key, err := ReadTokenFile(o.TokenFile)
	if err != nil {
		return nil, err
	}
	return append(env, o.TokenEnv+"="+key), nil
}

// checkEnvHost refuses (ErrEnvFile) an EXECUTOR_HOST in the env file p
// (its variables env) that is not a loopback IP literal (127.0.0.0/8 or
// ::1, as executor.listen with executor.exposure loopback): the env file
// comes after hbx's settings, so 0.0.0.0 or :: there would have the
// payload listen beyond loopback, which only health would find later.
func checkEnvHost(p string, env []string) error {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if k != "EXECUTOR_HOST" {
			continue
		}
		if a, err := netip.ParseAddr(v); err != nil || !a.IsLoopback() || a.Zone() != "" || a.Is4In6() {
			return fmt.Errorf("%w: executor.env_file %s sets EXECUTOR_HOST to %q: Executor listens on loopback only (want 127.0.0.0/8 or ::1, or remove the line; a box reached from outside sets executor.exposure: network)", ErrEnvFile, p, v)
		}
	}
	return nil
}

// ReadTokenFile returns the key on the first line of p, blanks around it
// removed: p must be a regular file (a symlink is followed) of mode 0600
// or stricter (checked on the descriptor read), at most 64 KiB, whose first line
// is one key (names.BearerKey: the grammar health.token_file's key obeys
// too, so the payload and hbx health see the same key). Errors wrap
// ErrTokenFile and name p, never the key.
func ReadTokenFile(p string) (string, error) {
	b, perm, err := regfile.ReadPrivate(p, 64<<10)
	if err != nil {
		return "", fmt.Errorf("%w: executor.token_file: %w", ErrTokenFile, err)
	}
	if perm&0o077 != 0 {
		return "", fmt.Errorf("%w: executor.token_file %s has mode %04o: it holds the MCP key and must be 0600 or stricter", ErrTokenFile, p, perm)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if !names.BearerKey(strings.TrimSpace(line)) {
		return "", fmt.Errorf("%w: executor.token_file %s: the first line is not one key (want one word of ASCII letters, digits and -._~+/, then any '=', at most %d bytes, e.g. 64 hex digits)", ErrTokenFile, p, names.MaxBearerKey)
	}
	return strings.TrimSpace(line), nil
}

// SetEnv sets k to v in s.Env, replacing what set it before (the image,
// hbx's settings or the env file), in its place; a k not set yet is
// added last. The env file comes after hbx's settings and may set
// EXECUTOR_HOST, PORT or EXECUTOR_DATA_DIR: harmless for the real start,
// whose values they are, but a run on a scratch port and directory
// (SmokeScratch, a rehearsal) sets its own again with SetEnv.
func (s *Spec) SetEnv(k, v string) {
	for i, kv := range s.Env {
		if name, _, _ := strings.Cut(kv, "="); name == k {
			s.Env[i] = k + "=" + v
			return
		}
	}
	s.Env = append(s.Env, k+"="+v)
}

// env keeps variables in first-set order with later sets replacing values.
type env struct {
	keys []string
	vals map[string]string
}

func newEnv(base []string) *env {
	e := &env{vals: map[string]string{}}
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		e.set(k, v)
	}
	return e
}

func (e *env) set(k, v string) {
	if _, ok := e.vals[k]; !ok {
		e.keys = append(e.keys, k)
	}
	e.vals[k] = v
}

func (e *env) list() []string {
	out := make([]string, 0, len(e.keys))
	for _, k := range e.keys {
		out = append(out, k+"="+e.vals[k])
	}
	return out
}
