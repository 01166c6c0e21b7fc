package config

import "strings"

// kind is the type of a config key's value; it picks the decoder.
type kind int

const (
	kindString   kind = iota // string
	kindInt                  // int
	kindBool                 // bool
	kindDuration             // time.Duration, Go syntax
	kindBytes                // int64 byte count, plain or with a binary suffix
	kindList                 // []string, comma-separated as a string
	kindMap                  // map[string]string, k=v,k=v as a string
)

// String names k as flag help shows it.
func (k kind) String() string {
	switch k {
	case kindInt:
		return "int"
	case kindBool:
		return "bool"
	case kindDuration:
		return "duration"
	case kindBytes:
		return "bytes"
	case kindList:
		return "list"
	case kindMap:
		return "map"
	}
	return "string"
}

// keySpec describes one config key.
type keySpec struct {
	name  string            // "executor.image"
	kind  kind              // decoder
	usage string            // flag help, with the default
	field func(*Config) any // pointer to the field: *string, *int, ...
}

// keySpecs lists every key in display order.
var keySpecs = []keySpec{
	{"executor.image", kindString, "image to install, name:tag@sha256:<64 hex> (default: the pinned executor-selfhost v1.5.12)",
		func(c *Config) any { return &c.Executor.Image }},
	{"executor.platform", kindString, "platform to install, os/arch[/variant] (default: the platform hbx was built for)",
		func(c *Config) any { return &c.Executor.Platform }},
	{"executor.platform_digests", kindMap, "pinned child manifest digests, os/arch=sha256:...,... (default: the pinned linux/arm64 digest)",
		func(c *Config) any { return &c.Executor.PlatformDigests }},
	{"executor.runtime_dir", kindString, "absolute directory of installed runtimes (default /storage/executor-runtime)",
		func(c *Config) any { return &c.Executor.RuntimeDir }},
	{"executor.data_dir", kindString, "absolute directory of Executor's persistent data (default /workspace/executor/data)",
		func(c *Config) any { return &c.Executor.DataDir }},
	{"executor.state_dir", kindString, "absolute directory of hbx's state (default /var/lib/hbx/executor)",
		func(c *Config) any { return &c.Executor.StateDir }},
	{"executor.user", kindString, "user Executor runs as (default: executor, an unprivileged system user hbx creates, when hbx runs as root; else the user running hbx)",
		func(c *Config) any { return &c.Executor.User }},
	{"executor.env_file", kindString, "absolute path of a KEY=value file added to Executor's environment (default none)",
		func(c *Config) any { return &c.Executor.EnvFile }},
	{"executor.exposure", kindString, "who may reach Executor: loopback, or network (executor.listen any IP literal, bearer gate part of readiness) (default loopback)",
		func(c *Config) any { return &c.Executor.Exposure }},
	{"executor.listen", kindString, "IP Executor listens on, loopback unless executor.exposure is network (default 127.0.0.1)",
		func(c *Config) any { return &c.Executor.Listen }},
	{"executor.port", kindInt, "port Executor listens on in the guest (default 4788)",
		func(c *Config) any { return &c.Executor.Port }},
	{"executor.host_port", kindInt, "host loopback port mapped to executor.port (default 4788)",
		func(c *Config) any { return &c.Executor.HostPort }},
	{"executor.allow_local_network", kindBool, "set EXECUTOR_ALLOW_LOCAL_NETWORK=true (default false)",
		func(c *Config) any { return &c.Executor.AllowLocalNetwork }},
	{"executor.disable_ipv6", kindBool, "set BUN_FEATURE_FLAG_DISABLE_IPV6=1 (default true)",
		func(c *Config) any { return &c.Executor.DisableIPv6 }},
	{"executor.disable_telemetry", kindBool, "set EXECUTOR_DISABLE_UPDATE_CHECK=1, EXECUTOR_DISABLE_ANALYTICS=1 and DO_NOT_TRACK=1 unless executor.env_file sets them (default true)",
		func(c *Config) any { return &c.Executor.DisableTelemetry }},
	{"executor.token_file", kindString, "absolute path of a mode-0600 file holding the MCP bearer key handed to Executor (default none)",
		func(c *Config) any { return &c.Executor.TokenFile }},
	{"executor.token_env", kindString, "Executor's environment variable that receives the key of executor.token_file (default none)",
		func(c *Config) any { return &c.Executor.TokenEnv }},
	{"executor.install_on_start", kindBool, "hbx supervise runs the install step when it starts, retried like a failed start of executor (default false)",
		func(c *Config) any { return &c.Executor.InstallOnStart }},
	{"install.max_uncompressed_bytes", kindBytes, "cap on the bytes the layers expand to, e.g. 16GiB (default 16GiB)",
		func(c *Config) any { return &c.Install.MaxUncompressedBytes }},
	{"install.keep_blobs", kindBool, "keep the blobs of the releases on disk, so upgrades fetch only what changed (default true; false: none)",
		func(c *Config) any { return &c.Install.KeepBlobs }},
	{"install.lock_wait", kindDuration, "how long to wait for another install's lock (default 0: fail at once)",
		func(c *Config) any { return &c.Install.LockWait }},
	{"install.validate_timeout", kindDuration, "time limit of install.smoke_command's run, 0 for none (default 10s)",
		func(c *Config) any { return &c.Install.ValidateTimeout }},
	{"install.smoke_command", kindList, "argv run inside a staged release as the payload would run (on a scratch data directory and port), before activation; comma-separated (default none)",
		func(c *Config) any { return &c.Install.SmokeCommand }},
	{"install.timeout", kindDuration, "bound on a cold install, plus the image's size at install.min_rate; 0 for none (default 10m)",
		func(c *Config) any { return &c.Install.Timeout }},
	{"install.min_rate", kindBytes, "bytes per second the install deadline allows for the image's size, e.g. 256KiB; 0: install.timeout alone (default 256KiB)",
		func(c *Config) any { return &c.Install.MinRate }},
	{"registry.insecure_hosts", kindList, "loopback registry hosts host[:port] allowed over plain HTTP, comma-separated (default none)",
		func(c *Config) any { return &c.Registry.InsecureHosts }},
	{"registry.mirrors", kindList, "other locations of the image's repository, PREFIX=LOCATION, tried in order before its own name; comma-separated (default none)",
		func(c *Config) any { return &c.Registry.Mirrors }},
	{"registry.auth_file", kindString, "absolute path of an auth.json or docker config.json (default none)",
		func(c *Config) any { return &c.Registry.AuthFile }},
	{"registry.certs_dir", kindString, "absolute directory of per-registry CA certificates, <dir>/<host[:port]>/*.crt (default none)",
		func(c *Config) any { return &c.Registry.CertsDir }},
	{"registry.stall_timeout", kindDuration, "retry a registry request that receives no byte for this long, 0 for never (default 30s)",
		func(c *Config) any { return &c.Registry.StallTimeout }},
	{"registry.retries", kindInt, "retries of a registry request that failed transiently: stall, reset, 5xx, truncated (default 3)",
		func(c *Config) any { return &c.Registry.Retries }},
	{"supervisor.socket", kindString, "absolute path of the control socket, at most 107 bytes (default /run/hbx/hbx.sock)",
		func(c *Config) any { return &c.Supervisor.Socket }},
	{"supervisor.log_dir", kindString, "absolute directory of the programs' log files (default /var/log/hbx)",
		func(c *Config) any { return &c.Supervisor.LogDir }},
	{"supervisor.health_wait", kindDuration, "longest wait for a starting Executor's first healthy answer (default 60s)",
		func(c *Config) any { return &c.Supervisor.HealthWait }},
	{"supervisor.health_interval", kindDuration, "period of Executor's health checks while it runs (default 5s)",
		func(c *Config) any { return &c.Supervisor.HealthInterval }},
	{"supervisor.wedge_failures", kindInt, "failed health checks in a row that restart Executor, 0 for never (default 3)",
		func(c *Config) any { return &c.Supervisor.WedgeFailures }},
	{"health.timeout", kindDuration, "time limit of each hbx health check, network included (default 5s)",
		func(c *Config) any { return &c.Health.Timeout }},
	{"health.mcp_tools", kindList, "tool names MCP tools/list must return exactly, comma-separated (default execute,resume)",
		func(c *Config) any { return &c.Health.MCPTools }},
	{"health.token_file", kindString, "absolute path of a mode-0600 file holding the MCP bearer key for hbx health (default none)",
		func(c *Config) any { return &c.Health.TokenFile }},
	{"health.readiness", kindString, "the check that says Executor is ready and alive: api-health (with the key when health.token_file is set), mcp-auth or mcp-tools (default api-health)",
		func(c *Config) any { return &c.Health.Readiness }},
	{"backup.dir", kindString, "absolute directory of the backup archives, mode 0700 (default /workspace/backups)",
		func(c *Config) any { return &c.Backup.Dir }},
	{"backup.name", kindString, "start of the archives' file names (default executor)",
		func(c *Config) any { return &c.Backup.Name }},
	{"backup.paths", kindList, "extra absolute directories to back up, comma-separated (default none)",
		func(c *Config) any { return &c.Backup.Paths }},
	{"backup.keep", kindInt, "archives kept, older ones removed after a backup, 0 keeps all (default 7)",
		func(c *Config) any { return &c.Backup.Keep }},
	{"backup.keep_pre_restore", kindInt, "pre-restore copies of the data directory a restore keeps, and rolled-back copies a rollback keeps (at least 1) (default 2)",
		func(c *Config) any { return &c.Backup.KeepPreRestore }},
	{"backup.passphrase_file", kindString, "absolute path of a mode-0600 file holding the archives' passphrase (default none: prompt on the terminal)",
		func(c *Config) any { return &c.Backup.PassphraseFile }},
	{"backup.compression", kindString, "archive compression: gzip or zstd (default gzip)",
		func(c *Config) any { return &c.Backup.Compression }},
	{"backup.lock_wait", kindDuration, "how long backup and restore wait for another command's lock (default 0: fail at once)",
		func(c *Config) any { return &c.Backup.LockWait }},
	{"backup.health_wait", kindDuration, "how long a restore waits for the services to be healthy before undoing (default 2m)",
		func(c *Config) any { return &c.Backup.HealthWait }},
}

// sections are the top-level keys of the file.
var sections = []string{"executor", "install", "registry", "supervisor", "health", "programs", "backup"}

// lookupKey returns the spec of key.
func lookupKey(key string) (keySpec, bool) {
	for _, s := range keySpecs {
		if s.name == key {
			return s, true
		}
	}
	return keySpec{}, false
}

// EnvPrefix starts every environment variable hbx reads; any other variable
// with this prefix is an error.
const EnvPrefix = "HBX_"

// ConfigEnv names the config file when --config is not given (see
// LoadOptions). It is the one HBX_* variable that is not a key.
const ConfigEnv = "HBX_CONFIG"

// EnvName returns the environment variable of key: EnvPrefix, then the key
// upper-cased with dots turned to underscores. "executor.host_port" is
// HBX_EXECUTOR_HOST_PORT.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// FlagName returns the command-line flag of key, without dashes: the key
// with dots and underscores turned to dashes. "executor.host_port" is
// --executor-host-port.
func FlagName(key string) string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(key)
}
