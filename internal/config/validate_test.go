package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/go-digest"
)

var (
	hexA = strings.Repeat("a", 64)
	hexB = strings.Repeat("b", 64)
)

func TestValidateDefaults(t *testing.T) {
	c := Defaults()
	if err := c.Validate(); err != nil {
		t.Errorf("Defaults().Validate() = %v", err)
	}
}

func TestValidateRules(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string // Problem texts; nil means valid
	}{
		// executor.image
		{"image pinned", func(c *Config) { c.Executor.Image = "127.0.0.1:5000/x:v1@sha256:" + hexA }, nil},
		{"image without digest", func(c *Config) { c.Executor.Image = "ghcr.io/o/x:v1" },
			[]string{`executor.image: "ghcr.io/o/x:v1" has no digest (want name:tag@sha256:<64 hex>)`}},
		{"image without tag", func(c *Config) { c.Executor.Image = "ghcr.io/o/x@sha256:" + hexA },
			[]string{`executor.image: "ghcr.io/o/x@sha256:` + hexA + `" has no tag (want name:tag@sha256:<64 hex>)`}},
		{"image bare name", func(c *Config) { c.Executor.Image = "ghcr.io/o/x" },
			[]string{`executor.image: "ghcr.io/o/x" has no tag and no digest (want name:tag@sha256:<64 hex>)`}},
		{"image short digest", func(c *Config) { c.Executor.Image = "ghcr.io/o/x:v1@sha256:abcd" },
			[]string{`executor.image: "ghcr.io/o/x:v1@sha256:abcd" is not an image reference: invalid reference format (want name:tag@sha256:<64 hex>)`}},
		{"image empty", func(c *Config) { c.Executor.Image = "" },
			[]string{`executor.image: "" is empty (want name:tag@sha256:<64 hex>)`}},

		// executor.platform and executor.platform_digests
		{"platform with variant", func(c *Config) { c.Executor.Platform = "linux/arm/v7" }, nil},
		{"platform os only", func(c *Config) { c.Executor.Platform = "linux" },
			[]string{`executor.platform: "linux" is not a platform (want os/arch[/variant], e.g. linux/arm64)`}},
		{"digests bad key and value", func(c *Config) {
			c.Executor.PlatformDigests = map[string]string{"linux": "sha256:" + hexA, "linux/amd64": "sha512:" + hexA, "linux/arm64": "sha256:" + strings.ToUpper(hexB)}
		}, []string{
			`executor.platform_digests: "linux" has a key that is not a platform (want os/arch[/variant], e.g. linux/arm64)`,
			`executor.platform_digests.linux/amd64: "sha512:` + hexA + `" is not a sha256 digest (want sha256:<64 lowercase hex>)`,
			`executor.platform_digests.linux/arm64: "sha256:` + strings.ToUpper(hexB) + `" is not a sha256 digest (want sha256:<64 lowercase hex>)`,
		}},
		{"digests empty", func(c *Config) { c.Executor.PlatformDigests = map[string]string{} }, nil},

		// directories
		{"relative dir", func(c *Config) { c.Executor.DataDir = "data" },
			[]string{`executor.data_dir: "data" is not an absolute path`}},
		{"empty dir", func(c *Config) { c.Executor.StateDir = "" },
			[]string{`executor.state_dir: "" is not an absolute path`}},
		{"unclean dir", func(c *Config) { c.Executor.RuntimeDir = "/storage/../storage/rt/" },
			[]string{`executor.runtime_dir: "/storage/../storage/rt/" is not a clean path (want "/storage/rt")`}},
		{"data inside runtime", func(c *Config) { c.Executor.DataDir = "/storage/executor-runtime/data" },
			[]string{`executor.data_dir: "/storage/executor-runtime/data" is inside executor.runtime_dir "/storage/executor-runtime"`}},
		{"runtime inside state", func(c *Config) { c.Executor.RuntimeDir = "/var/lib/hbx/executor/rt" },
			[]string{`executor.runtime_dir: "/var/lib/hbx/executor/rt" is inside executor.state_dir "/var/lib/hbx/executor"`}},
		{"same dirs", func(c *Config) { c.Executor.StateDir = c.Executor.DataDir },
			[]string{`executor.state_dir: "/workspace/executor/data" is the same directory as executor.data_dir`}},
		{"root contains all", func(c *Config) { c.Executor.RuntimeDir = "/" }, []string{
			`executor.data_dir: "/workspace/executor/data" is inside executor.runtime_dir "/"`,
			`executor.state_dir: "/var/lib/hbx/executor" is inside executor.runtime_dir "/"`,
		}},
		{"sibling prefix is not inside", func(c *Config) { c.Executor.DataDir = "/storage/executor-runtime2" }, nil},

		// user, env_file
		{"empty user", func(c *Config) { c.Executor.User = "" }, []string{`executor.user: "" is empty (want a user name)`}},
		{"relative env file", func(c *Config) { c.Executor.EnvFile = "executor.env" },
			[]string{`executor.env_file: "executor.env" is not an absolute path`}},
		{"absolute env file", func(c *Config) { c.Executor.EnvFile = "/etc/hbx/executor.env" }, nil},

		// executor.listen
		{"listen 127.0.0.2", func(c *Config) { c.Executor.Listen = "127.0.0.2" }, nil},
		{"listen ::1", func(c *Config) { c.Executor.Listen = "::1" }, nil},
		{"listen any v4", func(c *Config) { c.Executor.Listen = "0.0.0.0" },
			[]string{`executor.listen: "0.0.0.0" is not a loopback address (want 127.0.0.0/8 or ::1)`}},
		{"listen any v6", func(c *Config) { c.Executor.Listen = "::" },
			[]string{`executor.listen: "::" is not a loopback address (want 127.0.0.0/8 or ::1)`}},
		{"listen localhost", func(c *Config) { c.Executor.Listen = "localhost" },
			[]string{`executor.listen: "localhost" is not a loopback address (want 127.0.0.0/8 or ::1)`}},
		{"listen public", func(c *Config) { c.Executor.Listen = "192.168.1.2" },
			[]string{`executor.listen: "192.168.1.2" is not a loopback address (want 127.0.0.0/8 or ::1)`}},
		{"listen mapped v4", func(c *Config) { c.Executor.Listen = "::ffff:127.0.0.1" },
			[]string{`executor.listen: "::ffff:127.0.0.1" is not a loopback address (want 127.0.0.0/8 or ::1)`}},
		{"listen zone", func(c *Config) { c.Executor.Listen = "::1%lo" },
			[]string{`executor.listen: "::1%lo" is not a loopback address (want 127.0.0.0/8 or ::1)`}},
		{"listen with port", func(c *Config) { c.Executor.Listen = "127.0.0.1:4788" },
			[]string{`executor.listen: "127.0.0.1:4788" is not a loopback address (want 127.0.0.0/8 or ::1)`}},

		// executor.exposure
		{"exposure network any v4", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "0.0.0.0"
		}, nil},
		{"exposure network any v6", func(c *Config) { c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "::" }, nil},
		{"exposure network interface address", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "172.18.0.2"
		}, nil},
		{"exposure network loopback", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "127.0.0.1"
		}, nil},
		{"exposure network name", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "localhost"
		},
			[]string{`executor.listen: "localhost" is not an IP literal (want e.g. 0.0.0.0, :: or an interface address; no names, no zone)`}},
		{"exposure network zone", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "fe80::1%eth0"
		},
			[]string{`executor.listen: "fe80::1%eth0" is not an IP literal (want e.g. 0.0.0.0, :: or an interface address; no names, no zone)`}},
		{"exposure network mapped", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "::ffff:0.0.0.0"
		},
			[]string{`executor.listen: "::ffff:0.0.0.0" is not an IP literal (want e.g. 0.0.0.0, :: or an interface address; no names, no zone)`}},
		{"exposure network multicast", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "224.0.0.1"
		},
			[]string{`executor.listen: "224.0.0.1" is a multicast or broadcast address, which no TCP listener binds (want e.g. 0.0.0.0, :: or an interface address)`}},
		{"exposure network v6 multicast", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "ff02::1"
		},
			[]string{`executor.listen: "ff02::1" is a multicast or broadcast address, which no TCP listener binds (want e.g. 0.0.0.0, :: or an interface address)`}},
		{"exposure network broadcast", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "255.255.255.255"
		},
			[]string{`executor.listen: "255.255.255.255" is a multicast or broadcast address, which no TCP listener binds (want e.g. 0.0.0.0, :: or an interface address)`}},
		{"exposure network with port", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "network", "/k", "0.0.0.0:4788"
		},
			[]string{`executor.listen: "0.0.0.0:4788" is not an IP literal (want e.g. 0.0.0.0, :: or an interface address; no names, no zone)`}},
		{"exposure network without a token file", func(c *Config) { c.Executor.Exposure, c.Executor.Listen = "network", "0.0.0.0" },
			[]string{`executor.exposure: "network" needs health.token_file (the bearer gate is part of readiness and health)`}},
		{"exposure loopback is strict", func(c *Config) {
			c.Executor.Exposure, c.Health.TokenFile, c.Executor.Listen = "loopback", "/k", "0.0.0.0"
		},
			[]string{`executor.listen: "0.0.0.0" is not a loopback address (want 127.0.0.0/8 or ::1)`}},
		{"exposure unknown", func(c *Config) { c.Executor.Exposure = "public" },
			[]string{`executor.exposure: "public" is not an exposure (want loopback or network)`}},

		// executor.token_file / token_env
		{"token file and env", func(c *Config) { c.Executor.TokenFile, c.Executor.TokenEnv = "/etc/hbx/box.key", "EXECUTOR_AUTH_TOKEN" }, nil},
		{"token file relative", func(c *Config) { c.Executor.TokenFile, c.Executor.TokenEnv = "box.key", "EXECUTOR_AUTH_TOKEN" },
			[]string{`executor.token_file: "box.key" is not an absolute path`}},
		{"token file without env", func(c *Config) { c.Executor.TokenFile = "/etc/hbx/box.key" },
			[]string{`executor.token_file: "/etc/hbx/box.key" needs executor.token_env (the variable that hands the key to Executor)`}},
		{"token env without file", func(c *Config) { c.Executor.TokenEnv = "EXECUTOR_AUTH_TOKEN" },
			[]string{`executor.token_env: "EXECUTOR_AUTH_TOKEN" needs executor.token_file (the file holding the key it receives)`}},
		{"token env set by hbx", func(c *Config) { c.Executor.TokenFile, c.Executor.TokenEnv = "/k", "EXECUTOR_HOST" },
			[]string{`executor.token_env: "EXECUTOR_HOST" is a variable hbx sets for Executor itself (want another name, e.g. EXECUTOR_AUTH_TOKEN)`}},
		{"token env a telemetry switch", func(c *Config) { c.Executor.TokenFile, c.Executor.TokenEnv = "/k", "DO_NOT_TRACK" },
			[]string{`executor.token_env: "DO_NOT_TRACK" is a variable hbx sets for Executor itself (want another name, e.g. EXECUTOR_AUTH_TOKEN)`}},
		{"token env not a name", func(c *Config) { c.Executor.TokenFile, c.Executor.TokenEnv = "/k", "1A=B" },
			[]string{`executor.token_env: "1A=B" is not an environment variable name (want letters, digits and '_', not starting with a digit)`}},

		// ports
		{"port 0", func(c *Config) { c.Executor.Port = 0 }, []string{`executor.port: 0 is not a port number (want 1-65535)`}},
		{"host port 65536", func(c *Config) { c.Executor.HostPort = 65536 },
			[]string{`executor.host_port: 65536 is not a port number (want 1-65535)`}},
		{"ports at the bounds", func(c *Config) { c.Executor.Port, c.Executor.HostPort = 1, 65535 }, nil},

		// install.*
		{"max bytes 0", func(c *Config) { c.Install.MaxUncompressedBytes = 0 },
			[]string{`install.max_uncompressed_bytes: 0 is not positive`}},
		{"negative durations", func(c *Config) {
			c.Install.LockWait, c.Install.ValidateTimeout, c.Registry.StallTimeout = -time.Second, -time.Millisecond, -time.Minute
		}, []string{
			`install.lock_wait: -1s is negative`,
			`install.validate_timeout: -1ms is negative`,
			`registry.stall_timeout: -1m0s is negative`,
		}},
		{"zero durations", func(c *Config) { c.Install.ValidateTimeout, c.Registry.StallTimeout = 0, 0 }, nil},
		{"smoke command", func(c *Config) { c.Install.SmokeCommand = []string{"bun", "--version"} }, nil},
		{"smoke command without a program", func(c *Config) { c.Install.SmokeCommand = []string{" ", "--version"} },
			[]string{`install.smoke_command: " ,--version" has an empty program name`}},
		{"smoke command written as one string", func(c *Config) { c.Install.SmokeCommand = []string{"bun --version"} },
			[]string{`install.smoke_command: "bun --version" has a blank in its program name (write the argv as a list, one item per argument: [bun, --version])`}},
		{"smoke command with a tab in the program", func(c *Config) { c.Install.SmokeCommand = []string{"bun\t-e", "1"} },
			[]string{`install.smoke_command: "bun\t-e,1" has a blank in its program name (write the argv as a list, one item per argument: [bun, -e, 1])`}},

		// registry.*
		{"loopback insecure hosts", func(c *Config) {
			c.Registry.InsecureHosts = []string{"127.0.0.1", "127.0.0.1:5000", "127.1.2.3:1", "localhost", "localhost:65535", "[::1]", "[::1]:5000"}
		}, nil},
		{"mirrors", func(c *Config) {
			c.Registry.Mirrors = []string{"ghcr.io/rhyssullivan/executor-selfhost=ghcr.io/usefulsoftwareco/executor-selfhost", "ghcr.io/a=127.0.0.1:5000/a"}
		}, nil},
		{"bad mirror", func(c *Config) { c.Registry.Mirrors = []string{"executor-selfhost"} }, []string{
			`registry.mirrors: "executor-selfhost" is not PREFIX=LOCATION (want PREFIX=LOCATION, each a fully qualified repository or registry/namespace without tag or digest, e.g. ghcr.io/rhyssullivan/executor-selfhost=ghcr.io/usefulsoftwareco/executor-selfhost)`,
		}},
		{"bad insecure hosts", func(c *Config) {
			c.Registry.InsecureHosts = []string{"ghcr.io", "10.0.0.1:5000", "::1", "[::1]5000", "[127.0.0.1]:5000", "localhost:0", "localhost:", "127.0.0.1:+80", "[::1"}
		}, []string{
			`registry.insecure_hosts: "ghcr.io" is not a loopback host[:port] (want 127.0.0.0/8, [::1] or localhost)`,
			`registry.insecure_hosts: "10.0.0.1:5000" is not a loopback host[:port] (want 127.0.0.0/8, [::1] or localhost)`,
			`registry.insecure_hosts: "::1" is not a loopback host[:port] (want 127.0.0.0/8, [::1] or localhost)`,
			`registry.insecure_hosts: "[::1]5000" is not a loopback host[:port] (want 127.0.0.0/8, [::1] or localhost)`,
			`registry.insecure_hosts: "[127.0.0.1]:5000" is not a loopback host[:port] (want 127.0.0.0/8, [::1] or localhost)`,
			`registry.insecure_hosts: "localhost:0" is not a loopback host[:port] (want 127.0.0.0/8, [::1] or localhost)`,
			`registry.insecure_hosts: "localhost:" is not a loopback host[:port] (want 127.0.0.0/8, [::1] or localhost)`,
			`registry.insecure_hosts: "127.0.0.1:+80" is not a loopback host[:port] (want 127.0.0.0/8, [::1] or localhost)`,
			`registry.insecure_hosts: "[::1" is not a loopback host[:port] (want 127.0.0.0/8, [::1] or localhost)`,
		}},
		{"relative auth file", func(c *Config) { c.Registry.AuthFile = "auth.json" },
			[]string{`registry.auth_file: "auth.json" is not an absolute path`}},
		{"negative retries", func(c *Config) { c.Registry.Retries = -1 }, []string{`registry.retries: -1 is negative`}},
		{"certs dir", func(c *Config) { c.Registry.CertsDir = "/etc/hbx/certs.d" }, nil},
		{"relative certs dir", func(c *Config) { c.Registry.CertsDir = "certs.d" },
			[]string{`registry.certs_dir: "certs.d" is not an absolute path`}},

		// health.*
		{"health timeout 0", func(c *Config) { c.Health.Timeout = 0 }, []string{`health.timeout: 0s is not positive`}},
		{"health tools empty", func(c *Config) { c.Health.MCPTools = nil },
			[]string{`health.mcp_tools: [] is empty (want the tool names, e.g. execute,resume)`}},
		{"health tools blank and twice", func(c *Config) { c.Health.MCPTools = []string{"execute", " ", "execute"} }, []string{
			`health.mcp_tools: " " is not a tool name`,
			`health.mcp_tools: "execute" is listed twice`,
		}},
		{"health relative token file", func(c *Config) { c.Health.TokenFile = "mcp.key" },
			[]string{`health.token_file: "mcp.key" is not an absolute path`}},
		{"health absolute token file", func(c *Config) { c.Health.TokenFile = "/etc/hbx/mcp.key" }, nil},
		{"health readiness mcp-auth", func(c *Config) { c.Health.Readiness = "mcp-auth" }, nil},
		{"health readiness mcp-tools with a key", func(c *Config) { c.Health.Readiness, c.Health.TokenFile = "mcp-tools", "/etc/hbx/mcp.key" }, nil},
		{"health readiness mcp-tools without a key", func(c *Config) { c.Health.Readiness = "mcp-tools" },
			[]string{`health.readiness: "mcp-tools" needs health.token_file (the check lists tools with the key)`}},
		{"health readiness unknown", func(c *Config) { c.Health.Readiness = "web-ui" },
			[]string{`health.readiness: "web-ui" is not a readiness (want api-health, mcp-auth or mcp-tools)`}},
		{"health readiness near one", func(c *Config) { c.Health.Readiness = "mcp_tools" },
			[]string{`health.readiness: "mcp_tools" is not a readiness (did you mean "mcp-tools"?)`}},

		// backup.*
		{"backup defaults and extras", func(c *Config) {
			c.Backup.Paths = []string{"/workspace/hermes-home", "/srv/notes"}
			c.Backup.PassphraseFile = "/etc/hbx/backup.pass"
			c.Backup.Compression = "zstd"
		}, nil},
		{"backup name of the pre-upgrade archives", func(c *Config) { c.Backup.Name = "pre-upgrade" },
			[]string{`backup.name: "pre-upgrade" is the pre-upgrade archives' name (hbx backup's backup.keep would remove the ones hbx rollback restores)`}},
		{"backup name starting like them", func(c *Config) { c.Backup.Name = "pre-upgrade.box1" }, nil},
		{"bad backup values", func(c *Config) {
			c.Backup.Dir = "/workspace/executor/data/backups"
			c.Backup.Name = "a/b"
			c.Backup.Paths = []string{"rel", "/workspace/x/", "/storage/executor-runtime/y", "/w", "/w/z"}
			c.Backup.PassphraseFile = "pass"
			c.Backup.Compression = "xz"
			c.Backup.Keep, c.Backup.KeepPreRestore = -1, -2
			c.Backup.LockWait, c.Backup.HealthWait = -time.Second, 0
		}, []string{
			`backup.dir: "/workspace/executor/data/backups" is executor.data_dir "/workspace/executor/data" or inside it`,
			`backup.name: "a/b" is not a file name prefix (want letters, digits, '.', '_' and '-')`,
			`backup.paths: "rel" is not an absolute path`,
			`backup.paths: "/workspace/x/" is not a clean path (want "/workspace/x")`,
			`backup.paths: "/storage/executor-runtime/y" is executor.runtime_dir "/storage/executor-runtime" or inside it`,
			`backup.paths: "/w" overlaps "/w/z"`,
			`backup.passphrase_file: "pass" is not an absolute path`,
			`backup.compression: "xz" is not a compression (want gzip or zstd)`,
			`backup.keep: -1 is negative`,
			`backup.keep_pre_restore: -2 is negative`,
			`backup.lock_wait: -1s is negative`,
			`backup.health_wait: 0s is not positive`,
		}},

		// Every problem at once.
		{"several problems", func(c *Config) {
			c.Executor.Listen = "0.0.0.0"
			c.Executor.Port = -1
			c.Registry.Retries = -2
		}, []string{
			`executor.listen: "0.0.0.0" is not a loopback address (want 127.0.0.0/8 or ::1)`,
			`executor.port: -1 is not a port number (want 1-65535)`,
			`registry.retries: -2 is negative`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Defaults()
			tt.mutate(&c)
			err := c.Validate()
			if diff := cmp.Diff(problemLines(err), tt.want); diff != "" {
				t.Errorf("Validate() problems (-got +want):\n%s", diff)
			}
			if (err != nil) != (tt.want != nil) {
				t.Errorf("Validate() = %v, want error: %v", err, tt.want != nil)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
		})
	}
}

func TestParseImageRef(t *testing.T) {
	tests := []struct {
		in      string
		want    ImageRef
		wantErr string
	}{
		{
			in: defaultImage,
			want: ImageRef{
				Name:   "ghcr.io/rhyssullivan/executor-selfhost",
				Domain: "ghcr.io",
				Path:   "rhyssullivan/executor-selfhost",
				Tag:    "v1.5.12",
				Digest: "sha256:e40b2179c005b3124e794e9a8505341db46d0a9a1631e7f3fdcd023462ecf70b",
			},
		},
		{
			in:   "127.0.0.1:5000/hbx/test:v1@sha256:" + hexA,
			want: ImageRef{Name: "127.0.0.1:5000/hbx/test", Domain: "127.0.0.1:5000", Path: "hbx/test", Tag: "v1", Digest: digest.Digest("sha256:" + hexA)},
		},
		{
			in:   "localhost:5000/test:latest@sha256:" + hexA,
			want: ImageRef{Name: "localhost:5000/test", Domain: "localhost:5000", Path: "test", Tag: "latest", Digest: digest.Digest("sha256:" + hexA)},
		},
		{
			in:   "oven/bun:1@sha256:" + hexA,
			want: ImageRef{Name: "docker.io/oven/bun", Domain: "docker.io", Path: "oven/bun", Tag: "1", Digest: digest.Digest("sha256:" + hexA)},
		},
		{in: "ghcr.io/o/x:v1", wantErr: `image reference "ghcr.io/o/x:v1" has no digest (want name:tag@sha256:<64 hex>)`},
		{in: "ghcr.io/o/x@sha256:" + hexA, wantErr: `has no tag`},
		{in: "ghcr.io/o/x:v1@sha256:" + strings.ToUpper(hexA), wantErr: `is not an image reference`},
		{in: "ghcr.io/o/x:v1@sha256:" + hexA[:63], wantErr: `is not an image reference`},
		{in: "ghcr.io/o/x:v1@sha512:" + strings.Repeat("a", 128), wantErr: `sha512`},
		{in: "ghcr.io/O/x:v1@sha256:" + hexA, wantErr: `is not an image reference`},
		{in: "ghcr.io/o/x:v1@sha256:" + hexA + " ", wantErr: `is not an image reference`},
		{in: "", wantErr: `is empty`},
	}
	for _, tt := range tests {
		got, err := ParseImageRef(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseImageRef(%q) = %v, want an ErrInvalid containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseImageRef(%q) = %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(got, tt.want); diff != "" {
			t.Errorf("ParseImageRef(%q) (-got +want):\n%s", tt.in, diff)
		}
		if s := got.String(); s != tt.want.Name+":"+tt.want.Tag+"@"+tt.want.Digest.String() {
			t.Errorf("ParseImageRef(%q).String() = %q", tt.in, s)
		}
	}
}

func TestParsePlatform(t *testing.T) {
	tests := []struct {
		in                string
		os, arch, variant string
		ok                bool
	}{
		{"linux/arm64", "linux", "arm64", "", true},
		{"linux/amd64", "linux", "amd64", "", true},
		{"linux/arm/v7", "linux", "arm", "v7", true},
		{"linux/arm64/v8", "linux", "arm64", "v8", true},
		{"linux", "", "", "", false},
		{"linux/", "", "", "", false},
		{"/arm64", "", "", "", false},
		{"linux/arm64/", "", "", "", false},
		{"linux/arm/v7/x", "", "", "", false},
		{"Linux/arm64", "", "", "", false},
		{"linux/arm 64", "", "", "", false},
		{"", "", "", "", false},
	}
	for _, tt := range tests {
		os, arch, variant, err := ParsePlatform(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParsePlatform(%q) error = %v, want ok %v", tt.in, err, tt.ok)
			continue
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("errors.Is(ParsePlatform(%q), ErrInvalid) = false", tt.in)
		}
		if os != tt.os || arch != tt.arch || variant != tt.variant {
			t.Errorf("ParsePlatform(%q) = %q, %q, %q, want %q, %q, %q", tt.in, os, arch, variant, tt.os, tt.arch, tt.variant)
		}
	}
}

func FuzzParseImageRef(f *testing.F) {
	f.Add(defaultImage)
	f.Add("127.0.0.1:5000/x:v1@sha256:" + hexA)
	f.Add("x:v1@sha512:" + strings.Repeat("a", 128))
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseImageRef(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseImageRef(%q) = %v, want ErrInvalid", s, err)
			}
			return
		}
		if r.Tag == "" || r.Digest.Algorithm() != digest.SHA256 || r.Digest.Validate() != nil {
			t.Fatalf("ParseImageRef(%q) = %+v, want a tag and a sha256 digest", s, r)
		}
		again, err := ParseImageRef(r.String())
		if err != nil || again != r {
			t.Fatalf("ParseImageRef(%q) = %+v, %v; want %+v", r.String(), again, err, r)
		}
	})
}
