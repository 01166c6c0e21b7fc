package config

import (
	"maps"
	"slices"
	"time"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/buildinfo"
)

// DefaultPath is the config file hbx reads when --config is not given. It
// may be absent: then only the environment, flags and defaults count.
const DefaultPath = "/etc/hbx/hbx.yaml"

// The pinned facts of MISSION.md, used by Defaults.
const (
	defaultImage       = "ghcr.io/rhyssullivan/executor-selfhost:v1.5.12@sha256:e40b2179c005b3124e794e9a8505341db46d0a9a1631e7f3fdcd023462ecf70b"
	defaultArm64Digest = "sha256:c089ee8bffdbd81c854c3aee47a788484398694149597bc9d8863491b07e262f"
)

// Config is hbx's effective configuration. Load returns it validated; each
// field's comment gives its key, unit and default.
type Config struct {
	Executor Executor // executor.*: the image and how to run it
	Install  Install  // install.*: limits of `hbx install`
	Registry Registry // registry.*: how to reach the registry
	// Supervisor tunes `hbx supervise` (supervisor.*).
	Supervisor Supervisor
	// Health tunes `hbx health` (health.*).
	Health Health
	// Programs are the supervised programs by name (programs.<name>.*),
	// from the config file only. Default: "executor" and "hermes".
	Programs map[string]Program
	// Backup tunes `hbx backup` and `hbx restore` (backup.*).
	Backup Backup
}

// Backup tunes `hbx backup` and `hbx restore` (keys backup.*).
type Backup struct {
	// Dir holds the archives (backup.dir), mode 0700. Absolute, not inside
	// executor.data_dir, runtime_dir or state_dir. Default
	// "/workspace/backups".
	Dir string
	// Name starts every archive's file name,
	// <name>-<UTC timestamp>.tar.gz.gpg (backup.name): letters, digits,
	// ".", "_", "-". Default "executor".
	Name string
	// Paths are extra directories archived beside executor.data_dir
	// (backup.paths); absolute, not overlapping each other nor inside the
	// data, runtime or state directories (the runtime and state
	// directories inside one are left out). Default none.
	Paths []string
	// Keep is how many archives to keep; older ones are removed after each
	// backup; 0 keeps all (backup.keep). Default 7.
	Keep int
	// KeepPreRestore is how many <data_dir>.pre-restore-<timestamp> copies
	// a restore keeps, its own included, and how many
	// <data_dir>.rolled-back-<timestamp> copies a rollback keeps (at least
	// its own: no archive holds that data) (backup.keep_pre_restore).
	// Default 2.
	KeepPreRestore int
	// PassphraseFile holds the archives' passphrase on its first line, as
	// gpg --passphrase-file reads it; mode 0600 or stricter. Empty means a
	// prompt on the terminal (backup.passphrase_file). Default "".
	PassphraseFile string
	// Compression is "gzip" (.tar.gz.gpg, what tar and gpg read) or
	// "zstd" (backup.compression). Default "gzip".
	Compression string
	// LockWait is how long backup and restore wait for the lock held by
	// another install, backup or restore; 0 fails at once
	// (backup.lock_wait). Default 0.
	LockWait time.Duration
	// HealthWait is how long a restore waits for Executor's health check
	// and every program RUNNING on the restored data before putting the
	// old data back, and how long a backup waits for the programs it
	// stopped to run again (backup.health_wait). Positive. Default 2m.
	HealthWait time.Duration
}

// Supervisor tunes `hbx supervise` and its control commands (keys
// supervisor.*).
type Supervisor struct {
	// Socket is the control socket, absolute, at most 107 bytes
	// (supervisor.socket). Default "/run/hbx/hbx.sock".
	Socket string
	// LogDir holds the programs' log files unless a program names its own
	// (supervisor.log_dir). Absolute. Default "/var/log/hbx".
	LogDir string
	// HealthWait is the longest a starting Executor may take to answer
	// GET /api/health with 200 (supervisor.health_wait). Positive.
	// Default 60s.
	HealthWait time.Duration
	// HealthInterval is the period of Executor's health checks while it
	// runs (supervisor.health_interval). Positive. Default 5s.
	HealthInterval time.Duration
	// WedgeFailures failed health checks in a row restart a running
	// Executor; 0 never does (supervisor.wedge_failures). Default 3.
	WedgeFailures int
}

// Health tunes `hbx health` (keys health.*).
type Health struct {
	// Timeout bounds each check, its network requests included
	// (health.timeout). Positive. Default 5s.
	Timeout time.Duration
	// MCPTools are exactly the tool names an authenticated MCP tools/list
	// must return, in any order (health.mcp_tools). Non-empty, no
	// duplicates. Default ["execute", "resume"].
	MCPTools []string
	// TokenFile holds the bearer key of the authenticated MCP check, on
	// its first line; mode 0600 or stricter. Absolute when set
	// (health.token_file). Default "" (the check is skipped unless the key
	// comes on standard input).
	TokenFile string
	// Readiness names the check that says a started Executor is ready
	// and, while it runs, still alive: the supervisor's readiness gate
	// and wedge probe, the waits of backup, restore and upgrade
	// (health.readiness): "api-health" (GET /api/health answers 200
	// with status "ok", sending the bearer key of TokenFile when set),
	// "mcp-auth" (POST /mcp without a key answers 401 with a Bearer
	// challenge) or "mcp-tools" (an MCP session with the key lists
	// exactly MCPTools; needs TokenFile). Default "api-health".
	Readiness string
}

// The values of executor.exposure.
const (
	// ExposureLoopback: Executor listens on a loopback address only.
	ExposureLoopback = "loopback"
	// ExposureNetwork: Executor may listen on any IP literal (a
	// container's interfaces), gated by its bearer key.
	ExposureNetwork = "network"
)

// Executor says which Executor image to run and how to run it (keys
// executor.*).
type Executor struct {
	// Image is the multi-platform OCI image to install, as
	// name:tag@sha256:<64 hex> (executor.image). Default: the pinned
	// ghcr.io/rhyssullivan/executor-selfhost:v1.5.12@sha256:e40b2179….
	Image string
	// Platform is the os/arch[/variant] whose child manifest is installed
	// (executor.platform). Default, also when set empty: the platform hbx
	// was built for, e.g. "linux/arm64".
	Platform string
	// PlatformDigests pins the child manifest digest of each platform, keyed
	// by os/arch[/variant] (executor.platform_digests). A platform without an
	// entry is pinned only through the index digest in Image. Default:
	// {"linux/arm64": "sha256:c089ee8b…"}. A value from a layer replaces the
	// whole map; it is not merged with lower layers.
	PlatformDigests map[string]string
	// RuntimeDir holds the installed, disposable runtime releases
	// (executor.runtime_dir). Absolute. Default "/storage/executor-runtime".
	RuntimeDir string
	// DataDir is Executor's persistent data directory, the image's /data
	// volume (executor.data_dir). Absolute. Default "/workspace/executor/data".
	DataDir string
	// StateDir holds hbx's own state: lock, install records
	// (executor.state_dir). Absolute. Default "/var/lib/hbx/executor".
	StateDir string
	// User is the user Executor runs as (executor.user). Default, also when
	// set empty: the user running hbx.
	User string
	// EnvFile is an optional file of KEY=value lines added to Executor's
	// environment, e.g. secrets (executor.env_file). Absolute when set.
	// Default "" (none).
	EnvFile string
	// Exposure says who may reach Executor (executor.exposure):
	// "loopback" (Listen is a loopback IP literal) or "network" (Listen
	// may be any IP literal, such as 0.0.0.0 in a container; then
	// health.token_file is required, the bearer gate joins readiness and
	// check listeners wants exactly Listen:Port). Default "loopback".
	Exposure string
	// Listen is the IP literal Executor listens on, a loopback one unless
	// Exposure is "network" (executor.listen). Default "127.0.0.1".
	Listen string
	// Port is the TCP port Executor listens on in the guest (executor.port).
	// Default 4788.
	Port int
	// HostPort is the loopback port on the host that maps to Port
	// (executor.host_port); hbx only reports it. Default 4788.
	HostPort int
	// AllowLocalNetwork sets EXECUTOR_ALLOW_LOCAL_NETWORK
	// (executor.allow_local_network). Default false.
	AllowLocalNetwork bool
	// DisableIPv6 sets BUN_FEATURE_FLAG_DISABLE_IPV6=1 in Executor's
	// environment (executor.disable_ipv6). Default true.
	DisableIPv6 bool
	// DisableTelemetry sets EXECUTOR_DISABLE_UPDATE_CHECK=1,
	// EXECUTOR_DISABLE_ANALYTICS=1 and DO_NOT_TRACK=1 in Executor's
	// environment (executor.disable_telemetry), each unless the env file
	// sets it: upstream checks npm for updates and, from v1.5.37, sends
	// anonymous analytics by default. Default true.
	DisableTelemetry bool
	// TokenFile holds the MCP bearer key handed to Executor, on its first
	// line; mode 0600 or stricter, absolute when set
	// (executor.token_file). Read at each start of Executor, never
	// printed. Default "" (the payload mints its own key).
	TokenFile string
	// TokenEnv names the environment variable of Executor that receives
	// the key of TokenFile (executor.token_env), e.g. EXECUTOR_AUTH_TOKEN.
	// Set together with TokenFile. Default "".
	TokenEnv string
	// InstallOnStart runs the install step when `hbx supervise` starts
	// (a failure retried like a failed start of the executor program),
	// never on a program restart (executor.install_on_start). Default
	// false.
	InstallOnStart bool
}

// Install bounds and tunes `hbx install` (keys install.*).
type Install struct {
	// MaxUncompressedBytes caps the total bytes the layers may expand to
	// (install.max_uncompressed_bytes). Positive. Default 16 GiB.
	MaxUncompressedBytes int64
	// KeepBlobs keeps the blobs of the releases under releases/ (current,
	// previous, a staged one) in the runtime directory's store after an
	// install or staging, so the next staging fetches only blobs it lacks;
	// without it the store is removed (install.keep_blobs). Default true.
	KeepBlobs bool
	// LockWait is how long to wait for another install's lock; 0 fails at
	// once (install.lock_wait). Default 0.
	LockWait time.Duration
	// ValidateTimeout bounds the run of SmokeCommand; 0 means no limit
	// (install.validate_timeout). Default 10s.
	ValidateTimeout time.Duration
	// SmokeCommand is an argv run inside a staged release as the native
	// run would run the payload (same user, environment, working
	// directory; but a scratch data and state directory and a free port,
	// never the live ones), before it is activated; a failure refuses the release
	// (install.smoke_command). Empty: none, the default. argv[0] is looked
	// up like the image's entry program: on the image's PATH inside the
	// rootfs.
	SmokeCommand []string
	// Timeout bounds a cold install (install.timeout): Timeout plus the
	// image's compressed size at MinRate (install.min_rate, bytes per
	// second) once the manifest is known. 0 means no bound. Defaults 10m
	// and 256 KiB/s.
	Timeout time.Duration
	MinRate int64
}

// Registry says how to talk to the registry (keys registry.*).
type Registry struct {
	// InsecureHosts are registry hosts, host[:port], that may be reached
	// over plain HTTP; each must be a loopback IP literal or localhost
	// (registry.insecure_hosts). Default none.
	InsecureHosts []string
	// Mirrors are other locations of the image's repository, each
	// "PREFIX=LOCATION" (release.ParseMirror), tried in order before the
	// image's own name as containers' registries.conf mirrors are; the
	// pinned digests decide what is accepted from any of them
	// (registry.mirrors). Default none.
	Mirrors []string
	// AuthFile is a containers auth.json or docker config.json holding
	// registry credentials; absolute when set (registry.auth_file).
	// Default "" (anonymous).
	AuthFile string
	// CertsDir holds extra CA certificates per registry in the containers
	// certs.d layout: <CertsDir>/<host[:port]>/*.crt are trusted, beside
	// the system's roots, for that registry (registry.certs_dir).
	// Absolute when set. Default "" (the system's roots only).
	CertsDir string
	// StallTimeout abandons an attempt at a registry request (index,
	// manifest, config or layer) that receives no byte for this long, and
	// retries it; a slow transfer that keeps moving is never abandoned. 0
	// means no limit (registry.stall_timeout). Default 30s.
	StallTimeout time.Duration
	// Retries is how many times a request that failed transiently (stall,
	// connection refused or reset, 5xx, truncated body) is retried, with a
	// doubling backoff; wrong bytes and 4xx answers are not retried
	// (registry.retries). Non-negative. Default 3.
	Retries int
}

// Defaults returns the built-in configuration: the pinned facts of the
// mission, the platform hbx was built for and the user running hbx (or its
// numeric uid when the user database has no entry for it). Every call
// returns fresh maps and slices.
func Defaults() Config {
	return Config{
		Executor: Executor{
			Image:            defaultImage,
			Platform:         buildinfo.Platform(),
			PlatformDigests:  map[string]string{"linux/arm64": defaultArm64Digest},
			RuntimeDir:       "/storage/executor-runtime",
			DataDir:          "/workspace/executor/data",
			StateDir:         "/var/lib/hbx/executor",
			User:             account.Default(),
			Exposure:         ExposureLoopback,
			Listen:           "127.0.0.1",
			Port:             4788,
			HostPort:         4788,
			DisableIPv6:      true,
			DisableTelemetry: true,
		},
		Install: Install{
			MaxUncompressedBytes: 16 << 30,
			KeepBlobs:            true,
			ValidateTimeout:      10 * time.Second,
			SmokeCommand:         []string{},
			Timeout:              10 * time.Minute,
			MinRate:              256 << 10,
		},
		Registry: Registry{
			InsecureHosts: []string{},
			Mirrors:       []string{},
			StallTimeout:  30 * time.Second,
			Retries:       3,
		},
		Supervisor: Supervisor{
			Socket:         "/run/hbx/hbx.sock",
			LogDir:         "/var/log/hbx",
			HealthWait:     60 * time.Second,
			HealthInterval: 5 * time.Second,
			WedgeFailures:  3,
		},
		Health: Health{
			Timeout:   5 * time.Second,
			MCPTools:  []string{"execute", "resume"},
			Readiness: "api-health",
		},
		Programs: defaultPrograms(),
		Backup: Backup{
			Dir:            "/workspace/backups",
			Name:           "executor",
			Paths:          []string{},
			Keep:           7,
			KeepPreRestore: 2,
			Compression:    "gzip",
			HealthWait:     2 * time.Minute,
		},
	}
}

// Keys returns every config key in display order, e.g. "executor.image"
// first and "registry.retries" last. The slice is fresh on each call.
func Keys() []string {
	keys := make([]string, len(keySpecs))
	for i, s := range keySpecs {
		keys[i] = s.name
	}
	return keys
}

// Value returns the value of key in c, typed by the key: string, int,
// int64 (install.max_uncompressed_bytes), bool, time.Duration, []string
// (registry.insecure_hosts) or map[string]string
// (executor.platform_digests); slices and maps are copies. It returns nil
// for an unknown key. Program keys ("programs.hermes.exitcodes", see
// ShownKeys) give the field's type, []int for exitcodes.
func (c *Config) Value(key string) any {
	spec, ok := lookupKey(key)
	if !ok {
		return c.programValue(key)
	}
	switch p := spec.field(c).(type) {
	case *string:
		return *p
	case *int:
		return *p
	case *int64:
		return *p
	case *bool:
		return *p
	case *time.Duration:
		return *p
	case *[]string:
		return slices.Clone(*p)
	case *map[string]string:
		return maps.Clone(*p)
	}
	return nil
}

// Validate checks c against every rule and returns nil or an error wrapping
// ErrInvalid that lists every Problem (see Problems). Load already calls it.
func (c *Config) Validate() error {
	return problemsError(validate(c, nil, nil))
}

// Source kinds: where an effective value came from.
const (
	SourceDefault = "default" // the built-in default
	SourceFile    = "file"    // the config file; Detail is its path
	SourceEnv     = "env"     // an environment variable; Detail is its name
	SourceFlag    = "flag"    // a command-line flag; Detail is "--name"
)

// Source says where one effective value came from.
type Source struct {
	// Kind is SourceDefault, SourceFile, SourceEnv or SourceFlag.
	Kind string
	// Detail is the file path, the variable name or the flag ("--executor-port");
	// empty for SourceDefault.
	Detail string
}

// String renders s for people: "default", "file /etc/hbx/hbx.yaml",
// "env HBX_EXECUTOR_IMAGE", "flag --executor-port".
func (s Source) String() string {
	if s.Detail == "" {
		return s.Kind
	}
	return s.Kind + " " + s.Detail
}

// Sources maps every config key to the Source of its effective value,
// and says which config file was read (File).
type Sources struct {
	byKey map[string]Source
	file  File
}

// File says which config file Load used and why.
type File struct {
	// Path is the file's path as given, or DefaultPath.
	Path string
	// Source is where Path came from: SourceFlag ("--config"), SourceEnv
	// (ConfigEnv) or SourceDefault.
	Source Source
	// Read is true when the file existed and was read; false for an absent
	// default file, when only the environment, flags and defaults count.
	Read bool
}

// String renders f for people: "config file /etc/hbx/hbx.yaml",
// "config file /x.yaml (from env HBX_CONFIG)" or "no config file
// (/etc/hbx/hbx.yaml is absent), defaults".
func (f File) String() string {
	switch {
	case !f.Read:
		return "no config file (" + f.Path + " is absent), defaults"
	case f.Source.Kind == SourceDefault || f.Source.Kind == "":
		return "config file " + f.Path
	}
	return "config file " + f.Path + " (from " + f.Source.String() + ")"
}

// File returns the config file Load used; the zero File for a nil s.
func (s *Sources) File() File {
	if s == nil {
		return File{}
	}
	return s.file
}

// Of returns the Source of key's effective value, or the zero Source for an
// unknown key or a nil s.
func (s *Sources) Of(key string) Source {
	if s == nil {
		return Source{}
	}
	return s.byKey[key]
}
