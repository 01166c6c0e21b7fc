package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/suggest"
)

// writeConfig writes a config file into a fresh temp directory.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hbx.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// parsedFlags registers the key flags on a new set and parses args.
func parsedFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("Parse(%q) = %v", args, err)
	}
	return fs
}

// allSources returns the source of every key.
func allSources(s *Sources) map[string]Source {
	m := map[string]Source{}
	for _, k := range Keys() {
		m[k] = s.Of(k)
	}
	return m
}

// problemLines returns the text of each problem in err.
func problemLines(err error) []string {
	var lines []string
	for _, p := range Problems(err) {
		lines = append(lines, p.Error())
	}
	return lines
}

func TestLoadDefaultsWithoutFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.yaml")
	cfg, srcs, err := Load(LoadOptions{Path: missing, Env: []string{"PATH=/bin", "HBXTEST_E2E=1"}})
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if diff := cmp.Diff(*cfg, Defaults()); diff != "" {
		t.Errorf("Load() config (-got +want):\n%s", diff)
	}
	for k, s := range allSources(srcs) {
		if s != (Source{Kind: SourceDefault}) {
			t.Errorf("Of(%q) = %v, want default", k, s)
		}
	}
}

func TestLoadExampleConfig(t *testing.T) {
	path := filepath.Join("..", "..", "configs", "hbx.yaml")
	cfg, srcs, err := Load(LoadOptions{Path: path, PathExplicit: true})
	if err != nil {
		t.Fatalf("Load(%s) = %v", path, err)
	}
	if diff := cmp.Diff(*cfg, Defaults()); diff != "" {
		t.Errorf("Load(%s) config (-got +want):\n%s", path, diff)
	}
	// Every key is present in the example, so every source is the file,
	// but for the empty platform and user, which mean the default.
	for k, s := range allSources(srcs) {
		want := Source{Kind: SourceFile, Detail: path}
		if k == "executor.platform" || k == "executor.user" {
			want = Source{Kind: SourceDefault}
		}
		if s != want {
			t.Errorf("Of(%q) = %v, want %v", k, s, want)
		}
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(t.TempDir(), "fifo.yaml")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		opts        LoadOptions
		wantInvalid bool
		wantText    string
	}{
		{"missing explicit file", LoadOptions{Path: filepath.Join(dir, "nope.yaml"), PathExplicit: true}, true, "does not exist"},
		{"not yaml", LoadOptions{Path: writeConfig(t, "executor: [unclosed\n")}, true, "parse config file"},
		{"top level list", LoadOptions{Path: writeConfig(t, "- a\n- b\n")}, true, "parse config file"},
		{"tab indent", LoadOptions{Path: writeConfig(t, "executor:\n\tport: 1\n")}, true, "yaml: line 2: found character that cannot start any token (a tab: YAML indents with spaces)"},
		{"directory", LoadOptions{Path: dir, PathExplicit: true}, true, "is a directory: not a regular file"},
		{"fifo", LoadOptions{Path: fifo, PathExplicit: true}, true, "is a FIFO: not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Load(tt.opts)
			if err == nil {
				t.Fatal("Load() = nil, want error")
			}
			if got := errors.Is(err, ErrInvalid); got != tt.wantInvalid {
				t.Errorf("errors.Is(%v, ErrInvalid) = %v, want %v", err, got, tt.wantInvalid)
			}
			if strings.Contains(err.Error(), "While parsing") {
				t.Errorf("Load() = %q, want no viper prefix (errors are lowercase phrases)", err)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("Load() = %q, want it to contain %q", err, tt.wantText)
			}
		})
	}
}

func TestLoadEmptyFile(t *testing.T) {
	cfg, _, err := Load(LoadOptions{Path: writeConfig(t, "# nothing\n"), PathExplicit: true})
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if diff := cmp.Diff(*cfg, Defaults()); diff != "" {
		t.Errorf("Load() config (-got +want):\n%s", diff)
	}
}

func TestPrecedence(t *testing.T) {
	file := writeConfig(t, "executor:\n  port: 1001\n")
	env := []string{"HBX_EXECUTOR_PORT=1002"}
	flags := []string{"--executor-port=1003"}
	tests := []struct {
		name       string
		file       string
		env        []string
		flags      []string
		wantPort   int
		wantSource Source
	}{
		{"default", "", nil, nil, 4788, Source{SourceDefault, ""}},
		{"file beats default", file, nil, nil, 1001, Source{SourceFile, file}},
		{"env beats file", file, env, nil, 1002, Source{SourceEnv, "HBX_EXECUTOR_PORT"}},
		{"flag beats env", file, env, flags, 1003, Source{SourceFlag, "--executor-port"}},
		{"flag beats file", file, nil, flags, 1003, Source{SourceFlag, "--executor-port"}},
		{"flag beats default", "", nil, flags, 1003, Source{SourceFlag, "--executor-port"}},
		{"env beats default", "", env, nil, 1002, Source{SourceEnv, "HBX_EXECUTOR_PORT"}},
		{"last env entry wins", "", []string{"HBX_EXECUTOR_PORT=1", "HBX_EXECUTOR_PORT=1002"}, nil, 1002, Source{SourceEnv, "HBX_EXECUTOR_PORT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.file
			if path == "" {
				path = filepath.Join(t.TempDir(), "absent.yaml")
			}
			cfg, srcs, err := Load(LoadOptions{Path: path, Env: tt.env, Flags: parsedFlags(t, tt.flags...)})
			if err != nil {
				t.Fatalf("Load() = %v", err)
			}
			if cfg.Executor.Port != tt.wantPort {
				t.Errorf("Executor.Port = %d, want %d", cfg.Executor.Port, tt.wantPort)
			}
			if got := srcs.Of("executor.port"); got != tt.wantSource {
				t.Errorf("Of(executor.port) = %v, want %v", got, tt.wantSource)
			}
			if got := srcs.Of("executor.listen"); got != (Source{Kind: SourceDefault}) {
				t.Errorf("Of(executor.listen) = %v, want default", got)
			}
		})
	}
}

// TestDecodeEachLayer sets every key through each layer and checks the
// decoded values and their sources.
func TestDecodeEachLayer(t *testing.T) {
	want := Defaults()
	want.Executor.Image = "127.0.0.1:5000/executor:v2@sha256:" + strings.Repeat("a", 64)
	want.Executor.Platform = "linux/arm/v7"
	want.Executor.PlatformDigests = map[string]string{
		"linux/arm64": "sha256:" + strings.Repeat("b", 64),
		"linux/amd64": "sha256:" + strings.Repeat("c", 64),
	}
	want.Executor.RuntimeDir = "/r"
	want.Executor.DataDir = "/d"
	want.Executor.StateDir = "/s"
	want.Executor.User = "1000"
	want.Executor.EnvFile = "/etc/hbx/executor.env"
	want.Executor.Listen = "::1"
	want.Executor.Port = 1
	want.Executor.HostPort = 65535
	want.Executor.AllowLocalNetwork = true
	want.Executor.DisableIPv6 = false
	want.Executor.DisableTelemetry = false
	want.Install.MaxUncompressedBytes = 512 << 20
	want.Install.KeepBlobs = false
	want.Install.LockWait = 90 * time.Second
	want.Install.ValidateTimeout = 0
	want.Install.SmokeCommand = []string{"bun", "--version"}
	want.Install.Timeout = 0
	want.Install.MinRate = 1 << 20
	want.Registry.InsecureHosts = []string{"127.0.0.1:5000", "[::1]:5000", "localhost"}
	want.Registry.Mirrors = []string{"ghcr.io/rhyssullivan/executor-selfhost=ghcr.io/usefulsoftwareco/executor-selfhost"}
	want.Registry.AuthFile = "/root/.docker/config.json"
	want.Registry.StallTimeout = time.Minute
	want.Registry.Retries = 0
	want.Executor.InstallOnStart = true
	want.Executor.Exposure = "network"
	want.Executor.TokenFile = "/etc/hbx/box.key"
	want.Executor.TokenEnv = "EXECUTOR_AUTH_TOKEN"
	want.Registry.CertsDir = "/etc/hbx/certs.d"
	want.Supervisor = Supervisor{Socket: "/run/x.sock", LogDir: "/logs", HealthWait: 2 * time.Minute, HealthInterval: time.Second, WedgeFailures: 0}
	want.Health = Health{Timeout: 2 * time.Second, MCPTools: []string{"execute", "resume", "extra"}, TokenFile: "/etc/hbx/mcp.key", Readiness: "mcp-auth"}
	want.Backup = Backup{Dir: "/b", Name: "box-1", Paths: []string{"/w/hermes", "/w/notes"}, Keep: 0, KeepPreRestore: 5,
		PassphraseFile: "/etc/hbx/backup.pass", Compression: "zstd", LockWait: time.Minute, HealthWait: 30 * time.Second}

	file := `
executor:
  image: 127.0.0.1:5000/executor:v2@sha256:` + strings.Repeat("a", 64) + `
  platform: linux/arm/v7
  platform_digests:
    linux/arm64: sha256:` + strings.Repeat("b", 64) + `
    linux/amd64: sha256:` + strings.Repeat("c", 64) + `
  runtime_dir: /r
  data_dir: /d
  state_dir: /s
  user: 1000
  env_file: /etc/hbx/executor.env
  listen: "::1"
  port: 1
  host_port: 65535
  allow_local_network: true
  disable_ipv6: false
  disable_telemetry: false
  install_on_start: true
  exposure: network
  token_file: /etc/hbx/box.key
  token_env: EXECUTOR_AUTH_TOKEN
install:
  max_uncompressed_bytes: 512MiB
  keep_blobs: false
  lock_wait: 1m30s
  validate_timeout: 0
  smoke_command: [bun, --version]
  timeout: 0
  min_rate: 1MiB
registry:
  insecure_hosts: [127.0.0.1:5000, "[::1]:5000", localhost]
  mirrors: [ghcr.io/rhyssullivan/executor-selfhost=ghcr.io/usefulsoftwareco/executor-selfhost]
  auth_file: /root/.docker/config.json
  certs_dir: /etc/hbx/certs.d
  stall_timeout: 1m
  retries: 0
supervisor:
  socket: /run/x.sock
  log_dir: /logs
  health_wait: 2m
  health_interval: 1s
  wedge_failures: 0
health:
  timeout: 2s
  mcp_tools: [execute, resume, extra]
  token_file: /etc/hbx/mcp.key
  readiness: mcp-auth
backup:
  dir: /b
  name: box-1
  paths: [/w/hermes, /w/notes]
  keep: 0
  keep_pre_restore: 5
  passphrase_file: /etc/hbx/backup.pass
  compression: zstd
  lock_wait: 1m
  health_wait: 30s
`
	strs := map[string]string{
		"executor.image":                 want.Executor.Image,
		"executor.platform":              "linux/arm/v7",
		"executor.platform_digests":      "linux/arm64=sha256:" + strings.Repeat("b", 64) + ", linux/amd64=sha256:" + strings.Repeat("c", 64),
		"executor.runtime_dir":           "/r",
		"executor.data_dir":              "/d",
		"executor.state_dir":             "/s",
		"executor.user":                  "1000",
		"executor.env_file":              "/etc/hbx/executor.env",
		"executor.listen":                "::1",
		"executor.port":                  "1",
		"executor.host_port":             "65535",
		"executor.allow_local_network":   "true",
		"executor.disable_ipv6":          "0",
		"executor.disable_telemetry":     "false",
		"install.max_uncompressed_bytes": "536870912",
		"install.keep_blobs":             "FALSE",
		"install.lock_wait":              "90s",
		"install.validate_timeout":       "0",
		"install.smoke_command":          "bun,--version",
		"install.timeout":                "0",
		"install.min_rate":               "1048576",
		"registry.insecure_hosts":        "127.0.0.1:5000,[::1]:5000, localhost",
		"registry.mirrors":               "ghcr.io/rhyssullivan/executor-selfhost=ghcr.io/usefulsoftwareco/executor-selfhost",
		"registry.auth_file":             "/root/.docker/config.json",
		"registry.stall_timeout":         "60s",
		"registry.retries":               "0",
		"executor.install_on_start":      "true",
		"executor.exposure":              "network",
		"executor.token_file":            "/etc/hbx/box.key",
		"executor.token_env":             "EXECUTOR_AUTH_TOKEN",
		"registry.certs_dir":             "/etc/hbx/certs.d",
		"supervisor.socket":              "/run/x.sock",
		"supervisor.log_dir":             "/logs",
		"supervisor.health_wait":         "120s",
		"supervisor.health_interval":     "1s",
		"supervisor.wedge_failures":      "0",
		"health.timeout":                 "2s",
		"health.mcp_tools":               "execute, resume,extra",
		"health.token_file":              "/etc/hbx/mcp.key",
		"health.readiness":               "mcp-auth",
		"backup.dir":                     "/b",
		"backup.name":                    "box-1",
		"backup.paths":                   "/w/hermes, /w/notes",
		"backup.keep":                    "0",
		"backup.keep_pre_restore":        "5",
		"backup.passphrase_file":         "/etc/hbx/backup.pass",
		"backup.compression":             "zstd",
		"backup.lock_wait":               "60s",
		"backup.health_wait":             "30s",
	}
	var env, flags []string
	for k, v := range strs {
		env = append(env, EnvName(k)+"="+v)
		flags = append(flags, "--"+FlagName(k)+"="+v)
	}
	absent := filepath.Join(t.TempDir(), "absent.yaml")
	filePath := writeConfig(t, file)

	tests := []struct {
		name string
		opts LoadOptions
		src  func(key string) Source
	}{
		{"file", LoadOptions{Path: filePath}, func(string) Source { return Source{SourceFile, filePath} }},
		{"env", LoadOptions{Path: absent, Env: env}, func(k string) Source { return Source{SourceEnv, EnvName(k)} }},
		{"flags", LoadOptions{Path: absent, Flags: parsedFlags(t, flags...)}, func(k string) Source { return Source{SourceFlag, "--" + FlagName(k)} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, srcs, err := Load(tt.opts)
			if err != nil {
				t.Fatalf("Load() = %v", err)
			}
			if diff := cmp.Diff(*cfg, want); diff != "" {
				t.Errorf("Load() config (-got +want):\n%s", diff)
			}
			for _, k := range Keys() {
				if got, want := srcs.Of(k), tt.src(k); got != want {
					t.Errorf("Of(%q) = %v, want %v", k, got, want)
				}
			}
		})
	}
}

func TestBareBoolFlag(t *testing.T) {
	cfg, _, err := Load(LoadOptions{
		Path:  filepath.Join(t.TempDir(), "absent.yaml"),
		Flags: parsedFlags(t, "--executor-allow-local-network", "--executor-disable-ipv6=false"),
	})
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if !cfg.Executor.AllowLocalNetwork || cfg.Executor.DisableIPv6 {
		t.Errorf("AllowLocalNetwork, DisableIPv6 = %v, %v; want true, false", cfg.Executor.AllowLocalNetwork, cfg.Executor.DisableIPv6)
	}
}

func TestEmptyMeansDefault(t *testing.T) {
	cfg, srcs, err := Load(LoadOptions{
		Path: filepath.Join(t.TempDir(), "absent.yaml"),
		Env:  []string{"HBX_EXECUTOR_PLATFORM=", "HBX_EXECUTOR_USER=", "HBX_EXECUTOR_PLATFORM_DIGESTS=", "HBX_REGISTRY_INSECURE_HOSTS="},
	})
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	d := Defaults()
	if cfg.Executor.Platform != d.Executor.Platform || cfg.Executor.User != d.Executor.User {
		t.Errorf("Platform, User = %q, %q; want %q, %q", cfg.Executor.Platform, cfg.Executor.User, d.Executor.Platform, d.Executor.User)
	}
	if diff := cmp.Diff(cfg.Executor.PlatformDigests, map[string]string{}); diff != "" {
		t.Errorf("PlatformDigests (-got +want):\n%s", diff)
	}
	wantSrcs := map[string]Source{
		"executor.platform":         {Kind: SourceDefault},
		"executor.user":             {Kind: SourceDefault},
		"executor.platform_digests": {Kind: SourceEnv, Detail: "HBX_EXECUTOR_PLATFORM_DIGESTS"},
		"registry.insecure_hosts":   {Kind: SourceEnv, Detail: "HBX_REGISTRY_INSECURE_HOSTS"},
	}
	for k, want := range wantSrcs {
		if got := srcs.Of(k); got != want {
			t.Errorf("Of(%q) = %v, want %v", k, got, want)
		}
	}
}

func TestEmptyMapInFileReplacesDefault(t *testing.T) {
	cfg, _, err := Load(LoadOptions{Path: writeConfig(t, "executor:\n  platform_digests: {}\n")})
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if diff := cmp.Diff(cfg.Executor.PlatformDigests, map[string]string{}); diff != "" {
		t.Errorf("PlatformDigests (-got +want):\n%s", diff)
	}
}

func TestLoadProblems(t *testing.T) {
	absent := filepath.Join(t.TempDir(), "absent.yaml")
	tests := []struct {
		name  string
		file  string
		env   []string
		flags []string
		want  []string // Problem texts; %s is the file path
	}{
		{
			name: "unknown file keys",
			file: "executor:\n  imag: x\n  port: 4788\nextra: 1\nregistry:\n  retries: 1\n  nested:\n    deep: true\nsupervisr:\n  sokcet: /x\nbackups: 1\nprogram:\n  hermes:\n    user: x\nhelth:\n  timeout: 1s\n",
			want: []string{
				`backups: unknown key (did you mean "backup"?) [file %s]`,
				`executor.imag: unknown key (did you mean "executor.image"?) [file %s]`,
				"extra: unknown key [file %s]",
				`helth.timeout: unknown key (did you mean "health.timeout"?) [file %s]`,
				`program.hermes.user: unknown key (did you mean "programs.hermes.user"?) [file %s]`,
				"registry.nested.deep: unknown key [file %s]",
				`supervisr.sokcet: unknown key (did you mean "supervisor.socket"?) [file %s]`,
			},
		},
		{
			// viper lowercases keys: "Executor" would merge silently
			// with "executor". Values (environment, digests) keep case.
			name: "capitalised file keys",
			file: "Executor:\n  Port: 4790\nexecutor:\n  listen: 127.0.0.2\nsupervisor:\n  Socket: /x\nprograms:\n  hermes:\n    User: x\n    environment:\n      HOME: /h\n",
			want: []string{
				`Executor: keys are lowercase (did you mean "executor"?) [file %s]`,
				`Executor.Port: keys are lowercase (did you mean "executor.port"?) [file %s]`,
				`supervisor.Socket: keys are lowercase (did you mean "supervisor.socket"?) [file %s]`,
				`programs.hermes.User: unknown key (did you mean "user"?) [file %s]`,
				`programs.hermes.ready_lock: "$HERMES_HOME/gateway.lock" names $HERMES_HOME, which programs.hermes.environment does not set (set it, or set ready_lock)`,
				`programs.hermes.ready_file: "$HERMES_HOME/gateway_state.json" names $HERMES_HOME, which programs.hermes.environment does not set (set it, or set ready_file)`,
				`programs.hermes.log_file: "$HERMES_HOME/logs/gateway.log" names $HERMES_HOME, which programs.hermes.environment does not set (set it, or set log_file)`,
			},
		},
		{
			name: "section not a mapping",
			file: "executor: 5\n",
			want: []string{"executor: 5 is not a mapping of keys [file %s]"},
		},
		{
			name: "unknown env variables",
			env:  []string{"HBX_EXECUTOR_IMAGES=x", "HBX_=1", "HBX_EXECUTOR_IMAGES=y", "hbx_executor_port=1", "HBX_Executor_Port=1", "HBX_CONFG=/x", "HBX_NOTHING_LIKE_IT=1"},
			want: []string{
				"HBX_: unknown environment variable (want HBX_CONFIG or HBX_<SECTION>_<KEY>, e.g. HBX_EXECUTOR_IMAGE)",
				`HBX_CONFG: unknown environment variable (did you mean "HBX_CONFIG"?)`,
				`HBX_EXECUTOR_IMAGES: unknown environment variable (did you mean "HBX_EXECUTOR_IMAGE"?)`,
				`HBX_Executor_Port: unknown environment variable (did you mean "HBX_EXECUTOR_PORT"?)`,
				"HBX_NOTHING_LIKE_IT: unknown environment variable (want HBX_CONFIG or HBX_<SECTION>_<KEY>, e.g. HBX_EXECUTOR_IMAGE)",
			},
		},
		{
			name: "bad values name key and source",
			env: []string{
				"HBX_EXECUTOR_PORT=abc",
				"HBX_EXECUTOR_DISABLE_IPV6=yes",
				"HBX_INSTALL_LOCK_WAIT=30",
				"HBX_INSTALL_MAX_UNCOMPRESSED_BYTES=16GB",
				"HBX_EXECUTOR_PLATFORM_DIGESTS=linux/arm64",
				"HBX_REGISTRY_INSECURE_HOSTS=127.0.0.1,,localhost",
			},
			flags: []string{"--registry-retries=1.5"},
			want: []string{
				`executor.platform_digests: "linux/arm64" is not a list of key=value items [env HBX_EXECUTOR_PLATFORM_DIGESTS]`,
				`executor.port: "abc" is not an integer [env HBX_EXECUTOR_PORT]`,
				`executor.disable_ipv6: "yes" is not a boolean (want true or false) [env HBX_EXECUTOR_DISABLE_IPV6]`,
				`install.max_uncompressed_bytes: "16GB" is not a size (want bytes, or an integer with KiB, MiB, GiB or TiB) [env HBX_INSTALL_MAX_UNCOMPRESSED_BYTES]`,
				`install.lock_wait: "30" is not a duration (want Go syntax, e.g. 30s or 1m30s) [env HBX_INSTALL_LOCK_WAIT]`,
				`registry.insecure_hosts: "127.0.0.1,,localhost" has an empty item [env HBX_REGISTRY_INSECURE_HOSTS]`,
				`registry.retries: "1.5" is not an integer [flag --registry-retries]`,
			},
		},
		{
			name: "bad file types",
			file: "executor:\n  port: 4788.5\n  listen: [a]\n  platform_digests:\n    linux/arm64: 5\ninstall:\n  lock_wait: 30\n  keep_blobs: maybe\nregistry:\n  insecure_hosts: 5\n",
			want: []string{
				`executor.platform_digests: {"linux/arm64": 5} is not a mapping of strings [file %s]`,
				`executor.listen: ["a"] is not a string [file %s]`,
				`executor.port: 4788.5 is not an integer [file %s]`,
				`install.keep_blobs: "maybe" is not a boolean (want true or false) [file %s]`,
				`install.lock_wait: 30 is not a duration (want Go syntax, e.g. 30s or 1m30s) [file %s]`,
				`registry.insecure_hosts: 5 is not a list (want a YAML sequence or a,b,c) [file %s]`,
			},
		},
		{
			name: "list items shown quoted",
			file: "registry:\n  insecure_hosts: [a, \"\"]\ninstall:\n  smoke_command: [\"\", x]\n",
			want: []string{
				`install.smoke_command: ["", "x"] has an empty item [file %s]`,
				`registry.insecure_hosts: ["a", ""] has an empty item [file %s]`,
			},
		},
		{
			name:  "bad value overridden by a flag is still reported",
			file:  "executor:\n  port: nope\n",
			flags: []string{"--executor-port=4790"},
			want:  []string{`executor.port: "nope" is not an integer [file %s]`},
		},
		{
			name:  "rule broken by a flag names the flag",
			flags: []string{"--executor-listen=0.0.0.0", "--executor-port=0"},
			want: []string{
				`executor.listen: "0.0.0.0" is not a loopback address (want 127.0.0.0/8 or ::1) [flag --executor-listen]`,
				`executor.port: 0 is not a port number (want 1-65535) [flag --executor-port]`,
			},
		},
		{
			name: "decode failure is not also a rule failure",
			env:  []string{"HBX_EXECUTOR_LISTEN=0.0.0.0", "HBX_EXECUTOR_PORT=x"},
			file: "executor:\n  port: 0\n",
			want: []string{
				`executor.port: "x" is not an integer [env HBX_EXECUTOR_PORT]`,
				`executor.listen: "0.0.0.0" is not a loopback address (want 127.0.0.0/8 or ::1) [env HBX_EXECUTOR_LISTEN]`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := absent
			if tt.file != "" {
				path = writeConfig(t, tt.file)
			}
			cfg, srcs, err := Load(LoadOptions{Path: path, Env: tt.env, Flags: parsedFlags(t, tt.flags...)})
			if err == nil {
				t.Fatalf("Load() = nil error, want problems")
			}
			if cfg != nil || srcs != nil {
				t.Errorf("Load() = %v, %v with an error, want nil, nil", cfg, srcs)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var want []string
			for _, w := range tt.want {
				if strings.Contains(w, "%s") {
					w = strings.ReplaceAll(w, "%s", path)
				}
				want = append(want, w)
			}
			if diff := cmp.Diff(problemLines(err), want); diff != "" {
				t.Errorf("Load() problems (-got +want):\n%s", diff)
			}
		})
	}
}

func TestProblemListText(t *testing.T) {
	_, _, err := Load(LoadOptions{
		Path: filepath.Join(t.TempDir(), "absent.yaml"),
		Env:  []string{"HBX_EXECUTOR_LISTEN=localhost", "HBX_EXECUTOR_PORT=70000"},
	})
	want := "invalid config, 2 problems:\n" +
		`  executor.listen: "localhost" is not a loopback address (want 127.0.0.0/8 or ::1) [env HBX_EXECUTOR_LISTEN]` + "\n" +
		`  executor.port: 70000 is not a port number (want 1-65535) [env HBX_EXECUTOR_PORT]`
	if err == nil || err.Error() != want {
		t.Errorf("Load() = %v, want\n%s", err, want)
	}

	_, _, err = Load(LoadOptions{Path: filepath.Join(t.TempDir(), "absent.yaml"), Env: []string{"HBX_REGISTRY_RETRIES=-1"}})
	want = "invalid config: registry.retries: -1 is negative [env HBX_REGISTRY_RETRIES]"
	if err == nil || err.Error() != want {
		t.Errorf("Load() = %v, want %s", err, want)
	}
}

func TestNamesAreUnique(t *testing.T) {
	envs, flags := map[string]string{}, map[string]string{}
	for _, k := range Keys() {
		if prev, dup := envs[EnvName(k)]; dup {
			t.Errorf("EnvName(%q) = EnvName(%q) = %s", k, prev, EnvName(k))
		}
		envs[EnvName(k)] = k
		if prev, dup := flags[FlagName(k)]; dup {
			t.Errorf("FlagName(%q) = FlagName(%q) = %s", k, prev, FlagName(k))
		}
		flags[FlagName(k)] = k
	}
	if got, want := EnvName("executor.host_port"), "HBX_EXECUTOR_HOST_PORT"; got != want {
		t.Errorf("EnvName(executor.host_port) = %s, want %s", got, want)
	}
	if got, want := FlagName("install.max_uncompressed_bytes"), "install-max-uncompressed-bytes"; got != want {
		t.Errorf("FlagName(install.max_uncompressed_bytes) = %s, want %s", got, want)
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"17179869184", 16 << 30, true},
		{"16GiB", 16 << 30, true},
		{"512 MiB", 512 << 20, true},
		{"1KiB", 1024, true},
		{"2TiB", 2 << 40, true},
		{"7B", 7, true},
		{"16GB", 0, false},
		{"16gib", 0, false},
		{"-1", 0, false},
		{"GiB", 0, false},
		{"1.5GiB", 0, false},
		{"9999999999TiB", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseBytes(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseBytes(%q) = %d, %v, want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestValueAndKeys(t *testing.T) {
	c := Defaults()
	keys := Keys()
	if keys[0] != "executor.image" || keys[len(keys)-1] != "backup.health_wait" || len(keys) != 49 {
		t.Errorf("Keys() = %v, want 49 keys from executor.image to backup.health_wait", keys)
	}
	for _, k := range keys {
		if c.Value(k) == nil {
			t.Errorf("Value(%q) = nil", k)
		}
	}
	if got := c.Value("nope"); got != nil {
		t.Errorf("Value(nope) = %v, want nil", got)
	}
	if got := c.Value("install.lock_wait"); got != time.Duration(0) {
		t.Errorf("Value(install.lock_wait) = %#v, want 0s", got)
	}
	m := c.Value("executor.platform_digests").(map[string]string)
	m["x"] = "y"
	if _, ok := c.Executor.PlatformDigests["x"]; ok {
		t.Error("Value(executor.platform_digests) shares the map with the config")
	}
}

func FuzzLoadFile(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("..", "..", "configs", "hbx.yaml")); err == nil {
		f.Add(string(b))
	}
	f.Add("executor:\n  port: 1\n")
	f.Add("executor:\n  platform_digests: {}\n")
	f.Add("registry: [1, 2]\n")
	path := filepath.Join(f.TempDir(), "hbx.yaml") // one per worker process
	f.Fuzz(func(t *testing.T, body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := Load(LoadOptions{Path: path, PathExplicit: true})
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("Load() = %v, want nil or ErrInvalid", err)
		}
		if err == nil {
			if verr := cfg.Validate(); verr != nil {
				t.Fatalf("Load() passed a config that Validate() rejects: %v", verr)
			}
		}
	})
}

// TestKeysAreSuggested: a mistyped key or variable gets the known one
// (suggest.Closest over Keys and EnvName), a nonsense one nothing.
func TestKeysAreSuggested(t *testing.T) {
	tests := []struct {
		s          string
		candidates []string
		want       string
	}{
		{"executor.imge", Keys(), "executor.image"},
		{"supervisor.sockt", Keys(), "supervisor.socket"},
		{"executor.nonsense", Keys(), ""},
		{"HBX_EXECUTOR_PROT", []string{EnvName("executor.port"), EnvName("executor.image")}, "HBX_EXECUTOR_PORT"},
	}
	for _, tt := range tests {
		if got := suggest.Closest(tt.s, tt.candidates); got != tt.want {
			t.Errorf("suggest.Closest(%q, Keys) = %q, want %q", tt.s, got, tt.want)
		}
	}
}

func TestConfigEnv(t *testing.T) {
	fromEnv := writeConfig(t, "executor:\n  port: 4001\n")
	fromFlag := writeConfig(t, "executor:\n  port: 4002\n")
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	tests := []struct {
		name     string
		opts     LoadOptions
		wantFile File
		wantPort int
		wantErr  string
	}{
		{"env names the file", LoadOptions{Path: DefaultPath, Env: []string{"HBX_CONFIG=" + fromEnv}},
			File{fromEnv, Source{SourceEnv, "HBX_CONFIG"}, true}, 4001, ""},
		{"the last entry wins", LoadOptions{Env: []string{"HBX_CONFIG=" + missing, "HBX_CONFIG=" + fromEnv}},
			File{fromEnv, Source{SourceEnv, "HBX_CONFIG"}, true}, 4001, ""},
		{"the flag beats env", LoadOptions{Path: fromFlag, PathExplicit: true, Env: []string{"HBX_CONFIG=" + fromEnv}},
			File{fromFlag, Source{SourceFlag, "--config"}, true}, 4002, ""},
		{"empty env is unset", LoadOptions{Path: missing, Env: []string{"HBX_CONFIG="}},
			File{missing, Source{Kind: SourceDefault}, false}, 4788, ""},
		{"no env, absent default", LoadOptions{Path: missing},
			File{missing, Source{Kind: SourceDefault}, false}, 4788, ""},
		{"a missing env file is an error", LoadOptions{Env: []string{"HBX_CONFIG=" + missing}},
			File{}, 0, "config file " + missing + " (from env HBX_CONFIG) does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, srcs, err := Load(tt.opts)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load() = %v, want ErrInvalid containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load() = %v", err)
			}
			if diff := cmp.Diff(srcs.File(), tt.wantFile); diff != "" {
				t.Errorf("File() (-got +want):\n%s", diff)
			}
			if cfg.Executor.Port != tt.wantPort {
				t.Errorf("executor.port = %d, want %d", cfg.Executor.Port, tt.wantPort)
			}
		})
	}
}

func TestFileString(t *testing.T) {
	tests := []struct {
		f    File
		want string
	}{
		{File{"/etc/hbx/hbx.yaml", Source{Kind: SourceDefault}, true}, "config file /etc/hbx/hbx.yaml"},
		{File{"/x.yaml", Source{SourceEnv, "HBX_CONFIG"}, true}, "config file /x.yaml (from env HBX_CONFIG)"},
		{File{"/x.yaml", Source{SourceFlag, "--config"}, true}, "config file /x.yaml (from flag --config)"},
		{File{"/etc/hbx/hbx.yaml", Source{Kind: SourceDefault}, false}, "no config file (/etc/hbx/hbx.yaml is absent), defaults"},
	}
	for _, tt := range tests {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.f, got, tt.want)
		}
	}
}
