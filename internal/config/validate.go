package config

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/names"
	"github.com/hermesbox/hbx/internal/suggest"
	"github.com/hermesbox/hbx/release"
)

// ErrInvalid is wrapped by every error that a bad configuration value, key,
// variable or file causes, and by ParseImageRef's and ParsePlatform's
// errors. The CLI maps it to exit code 2.
var ErrInvalid = errors.New("invalid config")

// Problem is one broken rule: a key, the offending value, the rule and where
// the value came from. It wraps ErrInvalid. Its text is one line, e.g.
//
//	executor.listen: "0.0.0.0" is not a loopback address (want 127.0.0.0/8 or ::1) [env HBX_EXECUTOR_LISTEN]
type Problem struct {
	// Key is the config key ("executor.listen"), a map entry
	// ("executor.platform_digests.linux/arm64"), or the unknown file key or
	// environment variable.
	Key string
	// Value is the offending value as shown to people (strings quoted), or
	// "" when the rule is about the key itself.
	Value string
	// Rule says what is wrong and, where useful, what is wanted.
	Rule string
	// Source is where Value came from; zero when not known.
	Source Source
}

// Error renders p on one line: key, value, rule and source.
func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.Key)
	b.WriteString(": ")
	if p.Value != "" {
		b.WriteString(p.Value)
		b.WriteByte(' ')
	}
	b.WriteString(p.Rule)
	if p.Source.Kind != "" && p.Source.Kind != SourceDefault {
		fmt.Fprintf(&b, " [%s]", p.Source)
	}
	return b.String()
}

// Unwrap returns ErrInvalid.
func (p *Problem) Unwrap() error { return ErrInvalid }

// Problems returns every *Problem in err's tree, in order; nil when there
// are none (also for ErrInvalid errors that are not about one key, such as
// a file that is not YAML).
func Problems(err error) []*Problem {
	var out []*Problem
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case nil:
		case *Problem:
			out = append(out, x)
		case interface{ Unwrap() []error }:
			for _, c := range x.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		}
	}
	walk(err)
	return out
}

// problemList is the error Load and Validate return: all problems found.
type problemList []*Problem

// problemsError returns nil for no problems, else a problemList.
func problemsError(probs []*Problem) error {
	if len(probs) == 0 {
		return nil
	}
	return problemList(probs)
}

// Error renders one problem on one line, several as a header and one
// indented line each.
func (l problemList) Error() string {
	if len(l) == 1 {
		return "invalid config: " + l[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "invalid config, %d problems:", len(l))
	for _, p := range l {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap returns the problems, so errors.Is(err, ErrInvalid) holds.
func (l problemList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, p := range l {
		errs[i] = p
	}
	return errs
}

// Rule texts shared by several keys.
const (
	ruleNotAbs      = "is not an absolute path"
	ruleNotPort     = "is not a port number (want 1-65535)"
	ruleNegative    = "is negative"
	ruleNotLoopback = "is not a loopback address (want 127.0.0.0/8 or ::1)"
)

// validate checks c against every rule and returns the problems, each
// naming the source srcs gives (srcs may be nil). Keys in skip already
// failed to decode and are not checked again.
func validate(c *Config, srcs *Sources, skip map[string]bool) []*Problem {
	ps := &collector{srcs: srcs, skip: skip}
	validateImage(ps, &c.Executor)
	validateDirs(ps, &c.Executor)
	validateExecutor(ps, &c.Executor, c.Health.TokenFile)
	validateInstall(ps, c)
	validateRegistry(ps, &c.Registry)
	validateHealth(ps, &c.Health)
	validateBackup(ps, c)
	return append(ps.list, validatePrograms(c, srcs, skip)...)
}

// validateImage checks executor.image, executor.platform and
// executor.platform_digests.
func validateImage(ps *collector, e *Executor) {
	q := strconv.Quote
	if _, rule := parseImageRef(e.Image); rule != "" {
		ps.add("executor.image", q(e.Image), rule)
	}
	if _, _, _, rule := parsePlatform(e.Platform); rule != "" {
		ps.add("executor.platform", q(e.Platform), rule)
	}
	for _, p := range slices.Sorted(maps.Keys(e.PlatformDigests)) {
		if _, _, _, rule := parsePlatform(p); rule != "" {
			ps.addAs("executor.platform_digests", "executor.platform_digests", q(p), "has a key that "+rule)
		}
		if rule := sha256Rule(e.PlatformDigests[p]); rule != "" {
			ps.addAs("executor.platform_digests", "executor.platform_digests."+p, q(e.PlatformDigests[p]), rule)
		}
	}
}

// validateDirs checks executor.runtime_dir, data_dir and state_dir: each
// absolute and clean, none the same as or inside another.
func validateDirs(ps *collector, e *Executor) {
	q := strconv.Quote
	dirs := []struct{ key, path string }{
		{"executor.runtime_dir", e.RuntimeDir},
		{"executor.data_dir", e.DataDir},
		{"executor.state_dir", e.StateDir},
	}
	good := dirs[:0:0]
	for _, d := range dirs {
		switch {
		case !filepath.IsAbs(d.path):
			ps.add(d.key, q(d.path), ruleNotAbs)
		case filepath.Clean(d.path) != d.path:
			ps.add(d.key, q(d.path), fmt.Sprintf("is not a clean path (want %q)", filepath.Clean(d.path)))
		default:
			good = append(good, d)
		}
	}
	for i, a := range good {
		for _, b := range good[i+1:] {
			switch {
			case a.path == b.path:
				ps.add(b.key, q(b.path), "is the same directory as "+a.key)
			case within(a.path, b.path):
				ps.add(b.key, q(b.path), fmt.Sprintf("is inside %s %q", a.key, a.path))
			case within(b.path, a.path):
				ps.add(a.key, q(a.path), fmt.Sprintf("is inside %s %q", b.key, b.path))
			}
		}
	}
}

// validateExecutor checks the other executor.* keys.
func validateExecutor(ps *collector, e *Executor, healthTokenFile string) {
	q := strconv.Quote
	if e.User == "" {
		ps.add("executor.user", q(e.User), "is empty (want a user name)")
	}
	if e.EnvFile != "" && !filepath.IsAbs(e.EnvFile) {
		ps.add("executor.env_file", q(e.EnvFile), ruleNotAbs)
	}
	validateExposure(e, healthTokenFile, ps.add)
	if e.Port < 1 || e.Port > 65535 {
		ps.add("executor.port", strconv.Itoa(e.Port), ruleNotPort)
	}
	if e.HostPort < 1 || e.HostPort > 65535 {
		ps.add("executor.host_port", strconv.Itoa(e.HostPort), ruleNotPort)
	}
}

// validateInstall checks install.* and the registry's stall timeout
// beside the install durations.
func validateInstall(ps *collector, c *Config) {
	q := strconv.Quote
	in := &c.Install
	if in.MaxUncompressedBytes <= 0 {
		ps.add("install.max_uncompressed_bytes", strconv.FormatInt(in.MaxUncompressedBytes, 10), "is not positive")
	}
	if in.MinRate < 0 {
		ps.add("install.min_rate", strconv.FormatInt(in.MinRate, 10), ruleNegative)
	}
	if len(in.SmokeCommand) > 0 && strings.TrimSpace(in.SmokeCommand[0]) == "" {
		ps.add("install.smoke_command", q(strings.Join(in.SmokeCommand, ",")), "has an empty program name")
	} else if len(in.SmokeCommand) > 0 && strings.ContainsAny(in.SmokeCommand[0], " \t") {
		// smoke_command: bun --version is one item, the program
		// "bun --version", found nowhere after a whole download.
		words := append(strings.Fields(in.SmokeCommand[0]), in.SmokeCommand[1:]...)
		ps.add("install.smoke_command", q(strings.Join(in.SmokeCommand, ",")),
			"has a blank in its program name (write the argv as a list, one item per argument: ["+strings.Join(words, ", ")+"])")
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{
		{"install.lock_wait", in.LockWait},
		{"install.validate_timeout", in.ValidateTimeout},
		{"install.timeout", in.Timeout},
		{"registry.stall_timeout", c.Registry.StallTimeout},
	} {
		if d.d < 0 {
			ps.add(d.key, d.d.String(), ruleNegative)
		}
	}
}

// validateRegistry checks registry.*.
func validateRegistry(ps *collector, r *Registry) {
	q := strconv.Quote
	for _, h := range r.InsecureHosts {
		if !isLoopbackHost(h) {
			ps.add("registry.insecure_hosts", q(h), "is not a loopback host[:port] (want 127.0.0.0/8, [::1] or localhost)")
		}
	}
	for _, m := range r.Mirrors {
		if _, err := release.ParseMirror(m); err != nil {
			var re *release.RuleError
			if errors.As(err, &re) {
				ps.add("registry.mirrors", q(m), re.Rule)
			}
		}
	}
	if r.AuthFile != "" && !filepath.IsAbs(r.AuthFile) {
		ps.add("registry.auth_file", q(r.AuthFile), ruleNotAbs)
	}
	if r.CertsDir != "" && !filepath.IsAbs(r.CertsDir) {
		ps.add("registry.certs_dir", q(r.CertsDir), ruleNotAbs)
	}
	if r.Retries < 0 {
		ps.add("registry.retries", strconv.Itoa(r.Retries), ruleNegative)
	}
}

// validateHealth checks health.*.
func validateHealth(ps *collector, h *Health) {
	q := strconv.Quote
	if h.Timeout <= 0 {
		ps.add("health.timeout", h.Timeout.String(), "is not positive")
	}
	if len(h.MCPTools) == 0 {
		ps.add("health.mcp_tools", "[]", "is empty (want the tool names, e.g. execute,resume)")
	}
	for i, name := range h.MCPTools {
		switch {
		case strings.TrimSpace(name) == "":
			ps.add("health.mcp_tools", q(name), "is not a tool name")
		case slices.Contains(h.MCPTools[:i], name):
			ps.add("health.mcp_tools", q(name), "is listed twice")
		}
	}
	if h.TokenFile != "" && !filepath.IsAbs(h.TokenFile) {
		ps.add("health.token_file", q(h.TokenFile), ruleNotAbs)
	}
	switch h.Readiness {
	case "api-health", "mcp-auth":
	case "mcp-tools":
		if h.TokenFile == "" {
			ps.add("health.readiness", q(h.Readiness), "needs health.token_file (the check lists tools with the key)")
		}
	default:
		rule := "is not a readiness (want api-health, mcp-auth or mcp-tools)"
		if c := suggest.Closest(h.Readiness, []string{"api-health", "mcp-auth", "mcp-tools"}); c != "" {
			rule = fmt.Sprintf("is not a readiness (did you mean %q?)", c)
		}
		ps.add("health.readiness", q(h.Readiness), rule)
	}
}

// validateExposure checks executor.exposure with executor.listen (and
// healthTokenFile, health.token_file), and executor.token_file with
// executor.token_env, reporting through add.
func validateExposure(e *Executor, healthTokenFile string, add func(key, value, rule string)) {
	q := strconv.Quote
	switch e.Exposure {
	case ExposureLoopback:
		if !isLoopbackIP(e.Listen) {
			add("executor.listen", q(e.Listen), ruleNotLoopback)
		}
	case ExposureNetwork:
		if a, err := netip.ParseAddr(e.Listen); err != nil || a.Zone() != "" || a.Is4In6() {
			add("executor.listen", q(e.Listen), "is not an IP literal (want e.g. 0.0.0.0, :: or an interface address; no names, no zone)")
		} else if a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			add("executor.listen", q(e.Listen), "is a multicast or broadcast address, which no TCP listener binds (want e.g. 0.0.0.0, :: or an interface address)")
		}
		if healthTokenFile == "" {
			add("executor.exposure", q(e.Exposure), "needs health.token_file (the bearer gate is part of readiness and health)")
		}
	default:
		add("executor.exposure", q(e.Exposure), "is not an exposure (want loopback or network)")
	}
	if e.TokenFile != "" && !filepath.IsAbs(e.TokenFile) {
		add("executor.token_file", q(e.TokenFile), ruleNotAbs)
	}
	switch {
	case e.TokenEnv != "" && !names.EnvVar(e.TokenEnv):
		add("executor.token_env", q(e.TokenEnv), "is not an environment variable name (want letters, digits and '_', not starting with a digit)")
	case slices.Contains(hbxSetEnv, e.TokenEnv):
		add("executor.token_env", q(e.TokenEnv), "is a variable hbx sets for Executor itself (want another name, e.g. EXECUTOR_AUTH_TOKEN)")
	case e.TokenEnv != "" && e.TokenFile == "":
		add("executor.token_env", q(e.TokenEnv), "needs executor.token_file (the file holding the key it receives)")
	case e.TokenEnv == "" && e.TokenFile != "":
		add("executor.token_file", q(e.TokenFile), "needs executor.token_env (the variable that hands the key to Executor)")
	}
}

// hbxSetEnv are the variables hbx sets in Executor's environment itself
// (launch.Prepare): executor.token_env may not name one.
var hbxSetEnv = []string{"EXECUTOR_HOST", "PORT", "EXECUTOR_DATA_DIR", "EXECUTOR_WEB_BASE_URL", "EXECUTOR_ALLOW_LOCAL_NETWORK",
	"BUN_FEATURE_FLAG_DISABLE_IPV6", "PATH", "HOME", "TMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "USER", "LOGNAME",
	"EXECUTOR_DISABLE_UPDATE_CHECK", "EXECUTOR_DISABLE_ANALYTICS", "DO_NOT_TRACK"}

// validateBackup checks the backup.* keys.
func validateBackup(ps *collector, c *Config) {
	add, q := ps.add, strconv.Quote
	bk, e := &c.Backup, &c.Executor
	var hbxDirs []struct{ key, path string }
	for _, d := range []struct{ key, path string }{{"executor.data_dir", e.DataDir}, {"executor.runtime_dir", e.RuntimeDir}, {"executor.state_dir", e.StateDir}} {
		if filepath.IsAbs(d.path) && filepath.Clean(d.path) == d.path && d.path != "/" { // else reported above
			hbxDirs = append(hbxDirs, d)
		}
	}
	cleanAbs := func(key, p string) bool {
		switch {
		case !filepath.IsAbs(p):
			add(key, q(p), ruleNotAbs)
		case filepath.Clean(p) != p:
			add(key, q(p), fmt.Sprintf("is not a clean path (want %q)", filepath.Clean(p)))
		default:
			return true
		}
		return false
	}
	validateBackupPaths(ps, bk, hbxDirs, cleanAbs)
	if bk.PassphraseFile != "" {
		cleanAbs("backup.passphrase_file", bk.PassphraseFile)
	}
	if bk.Compression != "gzip" && bk.Compression != "zstd" {
		add("backup.compression", q(bk.Compression), "is not a compression (want gzip or zstd)")
	}
	if bk.Keep < 0 {
		add("backup.keep", strconv.Itoa(bk.Keep), ruleNegative)
	}
	if bk.KeepPreRestore < 0 {
		add("backup.keep_pre_restore", strconv.Itoa(bk.KeepPreRestore), ruleNegative)
	}
	if bk.LockWait < 0 {
		add("backup.lock_wait", bk.LockWait.String(), ruleNegative)
	}
	if bk.HealthWait <= 0 {
		add("backup.health_wait", bk.HealthWait.String(), "is not positive")
	}
}

// PreUpgradeArchiveName starts the file name of every pre-upgrade archive
// (internal/adapters.PreUpgradeName). backup.name may not be it: hbx
// backup's prune (backup.keep) would then count those archives as its own
// and remove the ones hbx rollback restores, sparing none.
const PreUpgradeArchiveName = "pre-upgrade"

// validateBackupPaths checks backup.dir, backup.name and backup.paths
// (against hbx's own directories and each other); cleanAbs reports a path
// that is not absolute and clean.
func validateBackupPaths(ps *collector, bk *Backup, hbxDirs []struct{ key, path string }, cleanAbs func(key, p string) bool) {
	add, q := ps.add, strconv.Quote
	if cleanAbs("backup.dir", bk.Dir) {
		for _, d := range hbxDirs {
			if bk.Dir == d.path || within(d.path, bk.Dir) {
				add("backup.dir", q(bk.Dir), fmt.Sprintf("is %s %q or inside it", d.key, d.path))
			}
		}
	}
	if bk.Name == "" || strings.IndexFunc(bk.Name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) >= 0 {
		add("backup.name", q(bk.Name), "is not a file name prefix (want letters, digits, '.', '_' and '-')")
	} else if bk.Name == PreUpgradeArchiveName {
		add("backup.name", q(bk.Name), "is the pre-upgrade archives' name (hbx backup's backup.keep would remove the ones hbx rollback restores)")
	}
	for i, p := range bk.Paths {
		if !cleanAbs("backup.paths", p) {
			continue
		}
		if p == "/" {
			add("backup.paths", q(p), "is the root directory")
		}
		for _, d := range hbxDirs {
			if p == d.path || within(d.path, p) {
				add("backup.paths", q(p), fmt.Sprintf("is %s %q or inside it", d.key, d.path))
			}
		}
		for _, o := range bk.Paths[i+1:] {
			if p == o || within(p, o) || within(o, p) {
				add("backup.paths", q(p), fmt.Sprintf("overlaps %q", o))
			}
		}
	}
}

// within reports whether the clean absolute path inner lies below outer.
func within(outer, inner string) bool {
	if outer == "/" {
		return inner != "/"
	}
	return strings.HasPrefix(inner, outer+"/")
}

// isLoopbackIP reports whether s is an IPv4 address in 127.0.0.0/8 or
// exactly ::1, without a zone. Names, including "localhost", are not.
func isLoopbackIP(s string) bool {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return false
	}
	return (a.Is4() && a.IsLoopback()) || a == netip.IPv6Loopback()
}

// isLoopbackHost reports whether s is host[:port] with a loopback IP
// literal (IPv6 in brackets) or "localhost" as host and, if present, a port
// in 1-65535.
func isLoopbackHost(s string) bool {
	host, port, hasPort := s, "", false
	if rest, ok := strings.CutPrefix(s, "["); ok {
		h, after, ok := strings.Cut(rest, "]")
		if !ok {
			return false
		}
		host = h
		if after != "" {
			port, hasPort = strings.CutPrefix(after, ":")
			if !hasPort {
				return false
			}
		}
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() || !isLoopbackIP(host) {
			return false
		}
	} else {
		if strings.Count(s, ":") > 1 {
			return false // IPv6 without brackets
		}
		host, port, hasPort = strings.Cut(s, ":")
		if host != "localhost" && !isLoopbackIP(host) {
			return false
		}
	}
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || strings.Trim(port, "0123456789") != "" || n < 1 || n > 65535 {
			return false
		}
	}
	return true
}

// sha256Rule returns "" when s is a sha256 digest with 64 lowercase hex
// digits, else the broken rule.
func sha256Rule(s string) string {
	d, err := digest.Parse(s)
	if err != nil || d.Algorithm() != digest.SHA256 {
		return "is not a sha256 digest (want sha256:<64 lowercase hex>)"
	}
	return ""
}
