package config

import (
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadPrograms(t *testing.T) {
	path := writeConfig(t, `
programs:
  hermes:
    enabled: false
  worker:
    command: /usr/bin/env "A B" 'c d' e\ f
    environment: [HOME=/home/w, Mixed_Case=1]
    autorestart: false
    exitcodes: [0, 3]
    depends_on: [executor]
    logfile_maxbytes: 1MiB
  executor:
    startsecs: 0
    priority: 5
`)
	cfg, srcs, err := Load(LoadOptions{Path: path})
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	want := defaultProgram("worker")
	want.Command = []string{"/usr/bin/env", "A B", "c d", "e f"}
	want.Environment = map[string]string{"HOME": "/home/w", "Mixed_Case": "1"}
	want.Autorestart, want.ExitCodes, want.DependsOn, want.LogfileMaxBytes = "false", []int{0, 3}, []string{"executor"}, 1<<20
	if diff := cmp.Diff(cfg.Programs["worker"], want); diff != "" {
		t.Errorf("Programs[worker] (-got +want):\n%s", diff)
	}
	if cfg.Programs["hermes"].Enabled || cfg.Programs["executor"].StartSecs != 0 || cfg.Programs["executor"].Priority != 5 {
		t.Errorf("hermes, executor = %+v, %+v", cfg.Programs["hermes"], cfg.Programs["executor"])
	}
	if got := srcs.Of("programs.worker.exitcodes"); got != (Source{SourceFile, path}) {
		t.Errorf("Of(programs.worker.exitcodes) = %v", got)
	}
	if got := srcs.Of("programs.worker.priority"); got != (Source{Kind: SourceDefault}) {
		t.Errorf("Of(programs.worker.priority) = %v", got)
	}
	if got := cfg.Value("programs.worker.exitcodes"); !cmp.Equal(got, []int{0, 3}) {
		t.Errorf("Value(programs.worker.exitcodes) = %v", got)
	}
	keys := cfg.ShownKeys()
	if !strings.HasPrefix(strings.Join(keys, " "), strings.Join(Keys(), " ")+" programs.executor.priority") {
		t.Errorf("ShownKeys() = %v, want Keys() then executor's (no command) first", keys)
	}
	for _, k := range keys {
		if cfg.Value(k) == nil {
			t.Errorf("Value(%q) = nil", k)
		}
	}
}

func TestExampleConfigPrograms(t *testing.T) {
	path := filepath.Join("..", "..", "configs", "hbx.yaml")
	cfg, srcs, err := Load(LoadOptions{Path: path, PathExplicit: true})
	if err != nil {
		t.Fatalf("Load(%s) = %v", path, err)
	}
	for _, k := range cfg.ShownKeys() {
		if strings.HasPrefix(k, "programs.") && srcs.Of(k).Kind != SourceFile {
			t.Errorf("the example does not set %s", k)
		}
	}
}

func TestProgramProblems(t *testing.T) {
	path := writeConfig(t, `
supervisor:
  socket: /run/`+strings.Repeat("s", 110)+`.sock
  health_interval: 0s
programs:
  executor:
    command: [/bin/false]
    stopsignal: BOGUS
  hermes:
    startsecs: -1
    exitcodes: [256]
    restart_exitcodes: [78]
    depends_on: [ghost, off]
    logfile_maxbytes: 1000
    nonsense: 1
  a:
    command: a
    depends_on: [b]
  b:
    command: b
    depends_on: [a]
    directory: relative
  off:
    command: x
    enabled: false
  hermse:
    enabled: false
  hermes-2:
    user: x
  worker:
    command: w
    fatal_exitcodes: [-2]
    depends_on: [hermse, exector]
    comand: x
  wroker:
    priority: 1
  Bad:
    command: x
  empty:
    environment: {A: 1}
  ready:
    command: r
    environment: {HOME: /h}
    ready_lock: $NOPE/x
    ready_file: rel.json
    ready_tcp: nope
    ready_http: ftp://x
    ready_wait: 0
    ready_max_age: -1
`)
	_, _, err := Load(LoadOptions{Path: path})
	want := []string{
		"programs.hermes.nonsense: unknown key [file %s]",
		"supervisor.socket: \"/run/" + strings.Repeat("s", 110) + ".sock\" is 120 bytes long (a unix socket path has at most 107) [file %s]",
		"supervisor.health_interval: 0s is not positive [file %s]",
		`programs.a.depends_on: is a dependency cycle: a -> b -> a [file %s]`,
		`programs.executor.command: cannot be set for the built-in executor (it runs the active release, ready when health.readiness passes; see executor.*) [file %s]`,
		`programs.executor.stopsignal: "BOGUS" is not a signal name (want TERM, HUP, INT, QUIT, KILL, USR1 or USR2) [file %s]`,
		`programs.hermes.exitcodes: 256 is not an exit code (want 0-255) [file %s]`,
		`programs.hermes.restart_exitcodes: 78 is also in fatal_exitcodes (a code is either a restart or a fatal one) [file %s]`,
		`programs.hermes.startsecs: -1 is negative [file %s]`,
		`programs.hermes.logfile_maxbytes: 1000 is not a whole number of MiB (log rotation counts in MiB, e.g. 50MiB) [file %s]`,
		`programs.hermes.depends_on: "ghost" is not a program [file %s]`,
		`programs.hermes.depends_on: "off" is a disabled program [file %s]`,
		`programs.b.directory: "relative" is not an absolute path [file %s]`,
		`programs.empty: is not a built-in program (executor, hermes) and has no command (want programs.empty.command) [file %s]`,
		`programs.hermse: is not a built-in program (executor, hermes) and has no command (did you mean "hermes"?) [file %s]`,
		`programs.hermes-2: is not a built-in program (executor, hermes) and has no command (did you mean "hermes"?) [file %s]`,
		`programs.wroker: is not a built-in program (executor, hermes) and has no command (did you mean "worker"?) [file %s]`,
		`programs.worker.depends_on: "hermse" is a disabled program [file %s]`,
		`programs.worker.fatal_exitcodes: -2 is not an exit code (want 0-255) [file %s]`,
		`programs.worker.depends_on: "exector" is not a program (did you mean "executor"?) [file %s]`,
		`programs.ready.ready_file: "rel.json" is not an absolute path [file %s]`,
		`programs.ready.ready_file: "rel.json" needs ready_field and ready_value, and they need it [file %s]`,
		`programs.ready.ready_http: "ftp://x" is not an http or https URL [file %s]`,
		`programs.ready.ready_lock: "$NOPE/x" names $NOPE, which programs.ready.environment does not set (set it, or set ready_lock) [file %s]`,
		`programs.ready.ready_max_age: -1 is negative [file %s]`,
		`programs.ready.ready_tcp: "nope" is not a host:port [file %s]`,
		`programs.ready.ready_wait: 0 is not positive [file %s]`,
		`programs.worker.comand: unknown key (did you mean "command"?) [file %s]`,
		`programs.Bad: is not a program name (want lowercase letters, digits, '-' and '_', not "all") [file %s]`,
	}
	got := problemLines(err)
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], "%s", path)
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))); diff != "" {
		t.Errorf("Load() problems (-got +want):\n%s", diff)
	}
}

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		rule string
	}{
		{"/usr/local/bin/hermes gateway run --replace", []string{"/usr/local/bin/hermes", "gateway", "run", "--replace"}, ""},
		{`a "b c" 'd e' f\ g "h\"i"`, []string{"a", "b c", "d e", "f g", `h"i`}, ""},
		{`  a   b  `, []string{"a", "b"}, ""},
		{`x""y ''`, []string{"xy", ""}, ""},
		{"", []string{}, ""},
		{`a "b`, nil, "has an unclosed quote"},
		{`a 'b`, nil, "has an unclosed quote"},
	}
	for _, tt := range tests {
		got, rule := SplitCommand(tt.in)
		if rule != tt.rule || !cmp.Equal(got, tt.want) {
			t.Errorf("SplitCommand(%q) = %q, %q; want %q, %q", tt.in, got, rule, tt.want, tt.rule)
		}
	}
}

// TestHermesContractEnvironment: programs.hermes.environment replaces
// the default map, but HERMES_GATEWAY_EXTERNAL_SUPERVISOR=1 (the
// gateway's contract) is always in it; set to another value it is one
// problem naming the key and the rule. Another program gets nothing added.
func TestHermesContractEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		want      map[string]string
		wantErr   string
	}{
		{"default", "", map[string]string{"HOME": "/home/hermes", "HERMES_HOME": "/workspace/hermes-home", "PATH": "/usr/local/bin:/usr/bin:/bin", "HERMES_GATEWAY_EXTERNAL_SUPERVISOR": "1"}, ""},
		{"replaced", "    environment: {HERMES_HOME: /h}\n", map[string]string{"HERMES_HOME": "/h", "HERMES_GATEWAY_EXTERNAL_SUPERVISOR": "1"}, ""},
		{"kept", "    environment: [HERMES_HOME=/h, HERMES_GATEWAY_EXTERNAL_SUPERVISOR=1]\n", map[string]string{"HERMES_HOME": "/h", "HERMES_GATEWAY_EXTERNAL_SUPERVISOR": "1"}, ""},
		{"other value", "    environment: {HERMES_HOME: /h, HERMES_GATEWAY_EXTERNAL_SUPERVISOR: \"0\"}\n", nil,
			`programs.hermes.environment: "HERMES_GATEWAY_EXTERNAL_SUPERVISOR=0" must be HERMES_GATEWAY_EXTERNAL_SUPERVISOR=1 for hermes (its contract: it must be told it is supervised; leave it out and hbx sets it) [file %s]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, "programs:\n  hermes:\n    enabled: true\n"+tc.env+"  worker:\n    command: w\n    environment: {A: b}\n")
			cfg, _, err := Load(LoadOptions{Path: path})
			if tc.wantErr != "" {
				want := []string{strings.ReplaceAll(tc.wantErr, "%s", path)}
				if diff := cmp.Diff(problemLines(err), want); diff != "" {
					t.Errorf("Load() problems (-got +want):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load() = %v", err)
			}
			if diff := cmp.Diff(cfg.Programs["hermes"].Environment, tc.want); diff != "" {
				t.Errorf("Programs[hermes].Environment (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(cfg.Programs["worker"].Environment, map[string]string{"A": "b"}); diff != "" {
				t.Errorf("Programs[worker].Environment (-got +want):\n%s", diff)
			}
		})
	}
}

// TestStopSignalNum: programs.<name>.stopsignal is one signal however it
// is spelled; a name Load refuses is 0 (SIGTERM to the supervisor and the
// data lock).
func TestStopSignalNum(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want syscall.Signal
	}{
		{"TERM", syscall.SIGTERM}, {"sigint", syscall.SIGINT}, {"SIGUSR1", syscall.SIGUSR1}, {"Hup", syscall.SIGHUP},
		{"KILL", syscall.SIGKILL}, {"bogus", 0}, {"", 0}, {"SIGSTOP", 0},
	} {
		if got := (Program{StopSignal: tc.in}).StopSignalNum(); got != tc.want {
			t.Errorf("StopSignalNum(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
