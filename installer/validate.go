package installer

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/hermesbox/hbx/release"
)

// ErrUnrunnable: the staged release's entry program cannot run natively on
// this host: it is missing or not executable, an ELF file of the rootfs is
// built for another architecture than the platform or needs a dynamic
// loader the host lacks, or a #! interpreter is missing. The release's
// bytes may be exactly the image's: this is not release.ErrCorrupt.
var ErrUnrunnable = errors.New("release cannot run natively")

// maxChain bounds how many programs validation follows from the entry
// program (a #! script to its interpreter, env to the program it names...):
// Linux itself gives up after a few levels of #! interpreters.
const maxChain = 8

// SmokeFunc runs the operator's smoke command inside the staged release
// inst as the native run would, within its own bound, and returns an error
// that says what happened ("smoke command ... did not finish within D",
// "smoke command ... exited N: <first line>").
type SmokeFunc func(ctx context.Context, inst *release.Installed) error

// validate checks a staged release before activation without starting it:
// the entry program and working directory resolve inside the rootfs, and
// what the native run would load is there and fits the platform (see
// checkLoads). Then opts.Smoke runs when set.
func validate(ctx context.Context, inst *release.Installed, plat Platform, opts Options) error {
	argv := inst.Meta.Config.Argv()
	if len(argv) == 0 || argv[0] == "" {
		return fmt.Errorf("%w: image config has no Entrypoint or Cmd", ErrUnrunnable)
	}
	prog, err := inst.Resolve(argv)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnrunnable, err)
	}
	hostPath := opts.HostPath
	if hostPath == "" {
		hostPath = release.DefaultHostPath
	}
	if err := checkLoads(inst.Rootfs(), prog, plat, hostPath, opts.RunAs); err != nil {
		return fmt.Errorf("%w: %w", ErrUnrunnable, err)
	}
	if opts.Smoke != nil {
		if err := opts.Smoke(ctx, inst); err != nil {
			return err
		}
	}
	return nil
}

// checkLoads follows the entry program to what the kernel loads when the
// native run execs it (no chroot: see package launch):
//
//   - a file of the rootfs that starts with #! runs its interpreter, a host
//     path; "#!/usr/bin/env NAME" runs NAME from the payload's PATH (the
//     image's PATH entries inside the rootfs, then hostPath), and the file
//     found is checked in turn;
//   - an ELF file of the rootfs must be an executable for plat's
//     architecture, and its program interpreter (PT_INTERP, the dynamic
//     loader) must exist on the host;
//   - a program of the host (a #! interpreter such as /bin/sh, env, or a
//     file the PATH finds outside the rootfs) only has to exist and be
//     executable: under qemu-user the host's shell is of another
//     architecture than the payload, as it must be.
//
// Every file in the chain must be a regular file that cred's user (the
// caller when nil) may execute. At most maxChain files are followed.
func checkLoads(rootfs string, prog *release.Program, plat Platform, hostPath string, cred *syscall.Credential) error {
	root, err := filepath.EvalSymlinks(rootfs)
	if err != nil {
		return fmt.Errorf("locate rootfs: %w", err)
	}
	c := chain{root: root, prog: prog, hostPath: hostPath, cred: cred, plat: plat}
	file, what := prog.Path, "program"
	for range maxChain {
		next, nextWhat, err := c.step(file, what)
		if err != nil || next == "" {
			return err
		}
		file, what = next, nextWhat
	}
	return fmt.Errorf("program %s: more than %d programs in its chain of interpreters", release.Shown(prog.Args[0]), maxChain)
}

type chain struct {
	root     string // the rootfs, symlinks resolved
	prog     *release.Program
	hostPath string
	cred     *syscall.Credential
	plat     Platform
}

// name is how errors call the host path p: its image path inside the
// rootfs, else the host path.
func (c *chain) name(p string) string {
	if rel, ok := c.inRoot(p); ok {
		return release.Shown("/" + rel)
	}
	return release.Shown(p)
}

func (c *chain) inRoot(p string) (string, bool) {
	if p == c.root {
		return "", true
	}
	rel, ok := strings.CutPrefix(p, c.root+"/")
	return rel, ok
}

// step checks file (a host path; what says its role for errors) and returns
// the next file the kernel or env would load, or "" when the chain ends.
func (c *chain) step(file, what string) (next, nextWhat string, err error) {
	real, err := filepath.EvalSymlinks(file)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("%s %s not found on the host", what, c.name(file))
	}
	if err != nil {
		return "", "", fmt.Errorf("resolve %s %s: %w", what, c.name(file), err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(real, &st); err != nil {
		return "", "", fmt.Errorf("stat %s %s: %w", what, c.name(real), err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || !executableBy(&st, c.cred) {
		return "", "", fmt.Errorf("%s %s is not an executable file%s", what, c.name(real), c.forWhom())
	}
	if err := c.searchable(real); err != nil {
		return "", "", fmt.Errorf("%s %s: %w", what, c.name(real), err)
	}
	_, inRoot := c.inRoot(real)
	if !inRoot {
		return "", "", nil // a host program: it exists and may run, whatever its architecture
	}
	f, err := os.Open(real)
	if err != nil {
		return "", "", fmt.Errorf("open %s %s: %w", what, c.name(real), err)
	}
	defer f.Close()
	head := make([]byte, 256) // the kernel reads #! lines from the first 256 bytes
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", "", fmt.Errorf("read %s %s: %w", what, c.name(real), err)
	}
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("#!")):
		return c.script(c.name(real), head)
	case bytes.HasPrefix(head, []byte(elf.ELFMAG)):
		return "", "", c.elf(f, what, c.name(real))
	}
	return "", "", fmt.Errorf("%s %s is neither an ELF executable nor a #! script", what, c.name(real))
}

// script returns the interpreter of the #! script named name, whose first
// bytes are head; "env NAME" leads to NAME on the payload's PATH.
func (c *chain) script(name string, head []byte) (string, string, error) {
	line, _, ok := bytes.Cut(head[2:], []byte("\n"))
	if !ok && len(head) == 256 {
		return "", "", fmt.Errorf("script %s: #! line longer than 255 bytes", name)
	}
	// The kernel splits the line at spaces and tabs only: a \r stays in
	// the interpreter's name.
	fields := strings.FieldsFunc(string(line), func(r rune) bool { return r == ' ' || r == '\t' })
	if len(fields) > 0 && strings.HasSuffix(fields[len(fields)-1], "\r") {
		return "", "", fmt.Errorf("script %s: #! line ends in \\r (DOS line endings): the kernel looks for %q", name, fields[0])
	}
	if len(fields) == 0 {
		return "", "", fmt.Errorf("script %s: #! line names no interpreter", name)
	}
	interp := fields[0]
	if !filepath.IsAbs(interp) { // the kernel resolves it from the working directory
		interp = filepath.Join(c.prog.Dir, interp)
	}
	if filepath.Base(interp) != "env" || len(fields) < 2 {
		return interp, "interpreter of " + name + ":", nil
	}
	// env itself must be there before the program it runs.
	if _, _, err := c.step(interp, "interpreter of "+name+":"); err != nil {
		return "", "", err
	}
	return c.envTarget(name, envArg(string(line)))
}

// envTarget returns the program "#!<env> arg" runs in the script name,
// found as env finds it. The kernel passes what follows the interpreter as
// one argument, its surrounding spaces and tabs trimmed: "#!/usr/bin/env
// bun run" makes env look for a program named "bun run". Only env -S
// splits it.
func (c *chain) envTarget(name, arg string) (string, string, error) {
	var args []string
	switch {
	case strings.HasPrefix(arg, "-S"):
		args = strings.FieldsFunc(arg[2:], func(r rune) bool { return r == ' ' || r == '\t' })
	case strings.ContainsAny(arg, " \t") && (strings.HasPrefix(arg, "-") || strings.Contains(arg, "=")):
		return "", "", fmt.Errorf("script %s: env gets %q as one argument (the kernel passes the rest of a #! line whole) and runs no program: split it with env -S", name, arg)
	case strings.ContainsAny(arg, " \t"):
		return "", "", fmt.Errorf("script %s: env looks for a program named %q (the kernel passes the rest of a #! line as one argument): split it with env -S", name, arg)
	default:
		args = []string{arg}
	}
	prog, envPath, known := envProgram(args)
	if !known {
		return "", "", nil // an env option hbx does not model: not followed further
	}
	if prog == "" {
		return "", "", fmt.Errorf("script %s: env %s names no program, so env runs the script itself again (the kernel appends its path): an endless loop", name, arg)
	}
	if strings.Contains(prog, "/") {
		return filepath.Join(c.prog.Dir, prog), "program " + release.Shown(prog) + " of " + name + ":", nil
	}
	dirs := append(append([]string(nil), c.prog.PathDirs...), filepath.SplitList(c.hostPath)...)
	where := "the payload's PATH (the image's PATH in the rootfs, then " + c.hostPath + ")"
	if envPath != nil {
		dirs, where = filepath.SplitList(*envPath), "the PATH env gives it ("+release.Shown(*envPath)+")"
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p, err := c.envFinds(name, d, prog)
		if err != nil {
			return "", "", err
		}
		if p != "" {
			return p, "program " + release.Shown(prog) + " of " + name + ":", nil
		}
	}
	return "", "", fmt.Errorf("script %s: %s not found on %s", name, release.Shown(prog), where)
}

// envFinds returns d/prog when it is a regular file executable by the
// payload's user, "" when not there. The image may provide prog in d as
// a symlink the native run resolves on the host ("bunx ->
// /usr/local/bin/bun"): the host's program, or none, would run instead of
// the image's, an error.
func (c *chain) envFinds(name, d, prog string) (string, error) {
	p := filepath.Join(d, prog)
	if _, inRoot := c.inRoot(d); inRoot {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(p)
			if _, in := c.inRoot(real); err != nil || !in {
				target, _ := os.Readlink(p)
				return "", fmt.Errorf("script %s: env finds %s in the image, a symlink to %s that the native run resolves on the host, not in the image", name, c.name(p), release.Shown(target))
			}
		}
	}
	var st syscall.Stat_t
	if syscall.Stat(p, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG && executableBy(&st, c.cred) {
		return p, nil
	}
	return "", nil
}

// envProgram finds the program env runs in its arguments args (from the
// #! line, split by -S): GNU and busybox env skip NAME=VALUE assignments
// and the options -i, -0, -v, - and --debug, -u NAME and -C DIR (or
// attached), up to "--". prog is "" when none is left (env then runs what
// follows on its command line: the script itself). path, when not nil,
// is the PATH env looks prog up in: the one an assignment sets, or libc's
// default "/bin:/usr/bin" when -i or -u PATH removed it. known is false at
// an option it does not model.
func envProgram(args []string) (prog string, path *string, known bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return args[i+1], path, true
			}
			return "", path, true
		case a == "-i" || a == "-" || a == "--ignore-environment":
			def := "/bin:/usr/bin"
			path = &def
		case a == "-0" || a == "-v" || a == "--null" || a == "--debug":
		case a == "-u" || a == "--unset":
			if i++; i < len(args) && args[i] == "PATH" {
				def := "/bin:/usr/bin"
				path = &def
			}
		case a == "-C" || a == "--chdir":
			i++
		case a == "-uPATH" || a == "--unset=PATH":
			def := "/bin:/usr/bin"
			path = &def
		case strings.HasPrefix(a, "-u") || strings.HasPrefix(a, "-C") || strings.HasPrefix(a, "--unset=") || strings.HasPrefix(a, "--chdir="):
		case strings.HasPrefix(a, "-"):
			return "", nil, false
		case strings.HasPrefix(a, "PATH="):
			v := strings.TrimPrefix(a, "PATH=")
			path = &v
		case strings.Contains(a, "="):
		default:
			return a, path, true
		}
	}
	return "", path, true
}

// envArg is the one argument the kernel passes after the interpreter of
// the #! line (the text after "#!", without its newline): what follows
// the interpreter's name, spaces and tabs trimmed on both sides.
func envArg(line string) string {
	line = strings.TrimLeft(line, " \t")
	i := strings.IndexAny(line, " \t")
	if i < 0 {
		return ""
	}
	return strings.Trim(line[i:], " \t")
}

// elf checks an ELF file of the rootfs: an executable for the platform's
// architecture whose dynamic loader, if any, the host has.
func (c *chain) elf(r io.ReaderAt, what, name string) error {
	f, err := elf.NewFile(r)
	if err != nil {
		return fmt.Errorf("%s %s: not a readable ELF file: %w", what, name, err)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s %s is an ELF %s, not an executable", what, name, f.Type)
	}
	if want, ok := elfMachines[c.plat.Architecture]; !ok || f.Machine != want {
		return fmt.Errorf("%s %s is an ELF for %s, the platform is %s", what, name, machineName(f.Machine), c.plat)
	}
	// One machine number serves both word sizes or byte orders of some
	// architectures (ppc64 and ppc64le, mips and mips64, x32 on amd64).
	if want, ok := elfLayouts[c.plat.Architecture]; ok && (f.Class != want.class || f.Data != want.data) {
		return fmt.Errorf("%s %s is an ELF of class %s and byte order %s, the platform %s needs %s and %s", what, name, f.Class, f.Data, c.plat, want.class, want.data)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
		if err != nil {
			return fmt.Errorf("%s %s: read its program interpreter: %w", what, name, err)
		}
		loader := string(bytes.TrimRight(b, "\x00"))
		if !filepath.IsAbs(loader) {
			return fmt.Errorf("%s %s: program interpreter %q is not an absolute path", what, name, loader)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(loader, &st); err != nil {
			if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
				return fmt.Errorf("%s %s: %s not found: the payload needs %s on the host", what, name, release.Shown(loader), libcOf(loader))
			}
			return fmt.Errorf("%s %s: stat its loader %s: %w", what, name, release.Shown(loader), err)
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			return fmt.Errorf("%s %s: its loader %s is not a regular file", what, name, release.Shown(loader))
		}
	}
	return nil
}

// searchable checks that cred's user may search every directory that
// holds the file at the resolved path real, as exec needs: a runtime
// directory made 0700, or an image directory of mode 0000, stops the
// payload's user short of a program it could otherwise execute.
func (c *chain) searchable(real string) error {
	if c.cred == nil {
		return nil
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		var st syscall.Stat_t
		if err := syscall.Stat(d, &st); err != nil {
			return fmt.Errorf("stat directory %s: %w", d, err)
		}
		if !executableBy(&st, c.cred) {
			return fmt.Errorf("directory %s (mode %04o, owner %d) cannot be searched%s", c.name(d), st.Mode&0o7777, st.Uid, c.forWhom())
		}
		if d == "/" {
			return nil
		}
	}
}

// forWhom says whose execute permission was checked.
func (c *chain) forWhom() string {
	if c.cred == nil {
		return ""
	}
	return fmt.Sprintf(" for uid %d", c.cred.Uid)
}

// elfMachines maps a platform architecture (GOARCH spelling, as OCI uses
// it) to its ELF machine.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"386":     elf.EM_386,
	"arm":     elf.EM_ARM,
	"riscv64": elf.EM_RISCV,
	"ppc64le": elf.EM_PPC64,
	"ppc64":   elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"loong64": elf.EM_LOONGARCH,
	"mips64":  elf.EM_MIPS,
	"mips":    elf.EM_MIPS,
}

// elfLayouts gives each platform architecture's ELF class and byte order.
var elfLayouts = map[string]struct {
	class elf.Class
	data  elf.Data
}{
	"amd64":   {elf.ELFCLASS64, elf.ELFDATA2LSB},
	"arm64":   {elf.ELFCLASS64, elf.ELFDATA2LSB},
	"386":     {elf.ELFCLASS32, elf.ELFDATA2LSB},
	"arm":     {elf.ELFCLASS32, elf.ELFDATA2LSB},
	"riscv64": {elf.ELFCLASS64, elf.ELFDATA2LSB},
	"ppc64le": {elf.ELFCLASS64, elf.ELFDATA2LSB},
	"ppc64":   {elf.ELFCLASS64, elf.ELFDATA2MSB},
	"s390x":   {elf.ELFCLASS64, elf.ELFDATA2MSB},
	"loong64": {elf.ELFCLASS64, elf.ELFDATA2LSB},
	"mips64":  {elf.ELFCLASS64, elf.ELFDATA2MSB},
	"mips":    {elf.ELFCLASS32, elf.ELFDATA2MSB},
}

// machineName names m by the architecture that uses it, or by its ELF name.
func machineName(m elf.Machine) string {
	for _, a := range []string{"amd64", "arm64", "386", "arm", "riscv64", "ppc64le", "s390x", "loong64", "mips64"} {
		if elfMachines[a] == m {
			return a
		}
	}
	return m.String()
}

// libcOf names the C library whose dynamic loader is at p.
func libcOf(p string) string {
	switch b := filepath.Base(p); {
	case strings.HasPrefix(b, "ld-musl"):
		return "musl"
	case strings.HasPrefix(b, "ld-linux"), strings.HasPrefix(b, "ld64.so"), strings.HasPrefix(b, "ld.so"):
		return "glibc"
	}
	return "its C library"
}

// executableBy says whether cred's user (the caller when nil) may execute a
// file with stat st, by its permission bits as the kernel checks them.
func executableBy(st *syscall.Stat_t, cred *syscall.Credential) bool {
	uid, gid, groups := uint32(os.Geteuid()), uint32(os.Getegid()), []uint32(nil)
	if cred != nil {
		uid, gid, groups = cred.Uid, cred.Gid, cred.Groups
	} else if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			groups = append(groups, uint32(g))
		}
	}
	mode := st.Mode & 0o777
	switch {
	case uid == 0:
		return mode&0o111 != 0
	case st.Uid == uid:
		return mode&0o100 != 0
	case st.Gid == gid || slices.Contains(groups, st.Gid):
		return mode&0o010 != 0
	}
	return mode&0o001 != 0
}
