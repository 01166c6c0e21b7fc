package config

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	yaml "go.yaml.in/yaml/v3"

	"github.com/hermesbox/hbx/internal/names"
	"github.com/hermesbox/hbx/internal/suggest"
)

// Program is one supervised program (keys programs.<name>.*), with
// supervisord's field names and units (integer seconds). The built-in
// "executor" runs the active release: its command, user, directory and
// environment come from executor.* and cannot be set here. Programs are
// read from the config file only (no HBX_* variables or flags).
type Program struct {
	// Command is the argv (programs.<name>.command): a YAML list, or a
	// string split like a shell would split it (quotes, backslashes; no
	// expansion). Command[0] without a slash is looked up on PATH.
	Command []string
	// User the program runs as; "" means the user running hbx
	// (programs.<name>.user).
	User string
	// Directory is the working directory, absolute; "" keeps hbx's
	// (programs.<name>.directory).
	Directory string
	// Environment is added to the program's clean environment (PATH, HOME,
	// USER, LOGNAME, SHELL of its user; never hbx's own)
	// (programs.<name>.environment):
	// a YAML mapping or a list of KEY=VALUE. A value replaces the whole map.
	Environment map[string]string
	// Priority orders starts (ascending) and stops (descending)
	// (programs.<name>.priority). Default 999; executor 100, hermes 200.
	Priority int
	// Autostart starts the program with `hbx supervise`
	// (programs.<name>.autostart). Default true.
	Autostart bool
	// Autorestart is "true", "false" or "unexpected"
	// (programs.<name>.autorestart). Default "unexpected"; executor and
	// hermes "true".
	Autorestart string
	// ExitCodes are the expected exit codes for autorestart "unexpected",
	// 0-255 (programs.<name>.exitcodes). Default [0].
	ExitCodes []int
	// RestartExitCodes are exit codes that ask for a restart now: started
	// again at once, no backoff, not counted as a failed start, whatever
	// autorestart says (programs.<name>.restart_exitcodes; systemd's
	// RestartForceExitStatus). Default none; hermes [75].
	RestartExitCodes []int
	// FatalExitCodes are exit codes after which the program is FATAL at
	// once, not restarted (programs.<name>.fatal_exitcodes; systemd's
	// RestartPreventExitStatus). Default none; hermes [78]. An exit that
	// follows hbx's own stop is expected whatever its code.
	FatalExitCodes []int
	// StartSecs is how many seconds the program must stay up to count as
	// started (programs.<name>.startsecs). Default 1.
	StartSecs int
	// StartRetries is how many failed starts are retried before FATAL
	// (programs.<name>.startretries). Default 3.
	StartRetries int
	// StopSignal is sent first to the program's process group: TERM, HUP,
	// INT, QUIT, KILL, USR1 or USR2 (programs.<name>.stopsignal). Default TERM.
	StopSignal string
	// StopWaitSecs is how many seconds to wait after StopSignal before
	// SIGKILL (programs.<name>.stopwaitsecs). Default 10.
	StopWaitSecs int
	// DependsOn names programs that must be RUNNING before this one starts
	// (programs.<name>.depends_on). Default none; hermes [executor].
	DependsOn []string
	// StdoutLogfile and StderrLogfile are absolute log paths; ""
	// means <supervisor.log_dir>/<name>.out.log and .err.log
	// (programs.<name>.stdout_logfile, stderr_logfile).
	StdoutLogfile, StderrLogfile string
	// LogfileMaxBytes rotates a log file at this size, a whole number of
	// MiB; 0 never rotates (programs.<name>.logfile_maxbytes). Default 50MiB.
	LogfileMaxBytes int64
	// LogfileBackups is how many rotated files to keep, 0 for all
	// (programs.<name>.logfile_backups). Default 10.
	LogfileBackups int
	// LogFile is a log the program writes itself, which `hbx logs NAME
	// --file` follows beside stdout and stderr; absolute, or naming
	// variables of its environment (programs.<name>.log_file). Default "";
	// hermes $HERMES_HOME/logs/gateway.log.
	LogFile string
	// Ready is what the program must offer before it is RUNNING
	// (programs.<name>.ready_*).
	Ready Readiness
	// Enabled: false removes the program (programs.<name>.enabled).
	// Default true.
	Enabled bool
}

// ExecutorProgram is the name of the built-in program that runs the active
// release (names.ExecutorProgram).
const ExecutorProgram = names.ExecutorProgram

// executorFixed are the fields of the built-in executor set by executor.*.
var executorFixed = []string{"command", "user", "directory", "environment", "log_file",
	"ready_lock", "ready_file", "ready_field", "ready_value", "ready_max_age", "ready_tcp", "ready_http", "ready_wait"}

// programField is one field of a program.
type programField struct {
	name   string
	decode func(raw any) (any, string)
	field  func(*Program) any
}

func decodeAs(k kind) func(any) (any, string) {
	return func(raw any) (any, string) { return decode(k, raw) }
}

// programFields lists a program's fields in display order.
var programFields = []programField{
	{"command", decodeArgv, func(p *Program) any { return &p.Command }},
	{"user", decodeAs(kindString), func(p *Program) any { return &p.User }},
	{"directory", decodeAs(kindString), func(p *Program) any { return &p.Directory }},
	{"environment", decodeEnvironment, func(p *Program) any { return &p.Environment }},
	{"priority", decodeAs(kindInt), func(p *Program) any { return &p.Priority }},
	{"autostart", decodeAs(kindBool), func(p *Program) any { return &p.Autostart }},
	{"autorestart", decodeAutorestart, func(p *Program) any { return &p.Autorestart }},
	{"exitcodes", decodeIntList, func(p *Program) any { return &p.ExitCodes }},
	{"restart_exitcodes", decodeIntList, func(p *Program) any { return &p.RestartExitCodes }},
	{"fatal_exitcodes", decodeIntList, func(p *Program) any { return &p.FatalExitCodes }},
	{"startsecs", decodeAs(kindInt), func(p *Program) any { return &p.StartSecs }},
	{"startretries", decodeAs(kindInt), func(p *Program) any { return &p.StartRetries }},
	{"stopsignal", decodeAs(kindString), func(p *Program) any { return &p.StopSignal }},
	{"stopwaitsecs", decodeAs(kindInt), func(p *Program) any { return &p.StopWaitSecs }},
	{"depends_on", decodeAs(kindList), func(p *Program) any { return &p.DependsOn }},
	{"stdout_logfile", decodeAs(kindString), func(p *Program) any { return &p.StdoutLogfile }},
	{"stderr_logfile", decodeAs(kindString), func(p *Program) any { return &p.StderrLogfile }},
	{"logfile_maxbytes", decodeAs(kindBytes), func(p *Program) any { return &p.LogfileMaxBytes }},
	{"logfile_backups", decodeAs(kindInt), func(p *Program) any { return &p.LogfileBackups }},
	{"log_file", decodeAs(kindString), func(p *Program) any { return &p.LogFile }},
	{"enabled", decodeAs(kindBool), func(p *Program) any { return &p.Enabled }},
}

func init() {
	i := len(programFields) - 1 // before enabled
	programFields = append(programFields[:i:i], append(readinessFields, programFields[i])...)
}

// defaultProgram returns the defaults of a program named name.
func defaultProgram(name string) Program {
	p := Program{
		Command: []string{}, Environment: map[string]string{}, Priority: 999, Autostart: true,
		Autorestart: "unexpected", ExitCodes: []int{0}, RestartExitCodes: []int{}, FatalExitCodes: []int{}, StartSecs: 1, StartRetries: 3, StopSignal: "TERM",
		StopWaitSecs: 10, DependsOn: []string{}, LogfileMaxBytes: 50 << 20, LogfileBackups: 10, Enabled: true,
		Ready: Readiness{Wait: 60},
	}
	switch name {
	case ExecutorProgram:
		p.Priority, p.Autorestart = 100, "true"
	case "hermes":
		p.Command = []string{"/usr/local/bin/hermes", "gateway", "run", "--replace"}
		p.User, p.Directory = "hermes", "/workspace/work"
		p.Environment = map[string]string{"HOME": "/home/hermes", "HERMES_HOME": "/workspace/hermes-home", "PATH": "/usr/local/bin:/usr/bin:/bin",
			"HERMES_GATEWAY_EXTERNAL_SUPERVISOR": "1"}
		// Its contract: SIGINT is a planned stop (a bare SIGTERM an
		// unexpected kill), its drain can take 180 s (upstream's unit:
		// TimeoutStopSec=210), and it logs to its own file.
		p.StopSignal, p.StopWaitSecs, p.LogFile = "INT", 210, "$HERMES_HOME/logs/gateway.log"
		p.Priority, p.Autorestart, p.DependsOn = 200, "true", []string{ExecutorProgram}
		p.RestartExitCodes, p.FatalExitCodes = []int{75}, []int{78}
		p.Ready = hermesReadiness
	}
	return p
}

// builtinPrograms are the programs that exist without being declared.
var builtinPrograms = []string{ExecutorProgram, "hermes"}

// knownPrograms returns the names a mistyped program name may have meant:
// the built-ins, then c's programs that have a command, sorted.
func knownPrograms(c *Config) []string {
	names := slices.Clone(builtinPrograms)
	for _, n := range slices.Sorted(maps.Keys(c.Programs)) {
		if !slices.Contains(names, n) && len(c.Programs[n].Command) > 0 {
			names = append(names, n)
		}
	}
	return names
}

// defaultPrograms returns the built-in programs: executor and hermes.
func defaultPrograms() map[string]Program {
	return map[string]Program{ExecutorProgram: defaultProgram(ExecutorProgram), "hermes": defaultProgram("hermes")}
}

// ProgramNames returns the names of c's programs, enabled or not, by
// priority then name.
func (c *Config) ProgramNames() []string {
	names := slices.Collect(maps.Keys(c.Programs))
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(c.Programs[a].Priority, c.Programs[b].Priority), strings.Compare(a, b))
	})
	return names
}

// EnabledPrograms returns the names of c's enabled programs (the ones
// `hbx supervise` runs), by priority then name; nil when none is.
func (c *Config) EnabledPrograms() []string {
	var names []string
	for _, n := range c.ProgramNames() {
		if c.Programs[n].Enabled {
			names = append(names, n)
		}
	}
	return names
}

// AutostartPrograms returns the names of c's enabled programs that start
// with the supervisor (programs.<name>.autostart), by priority then name;
// nil when none does.
func (c *Config) AutostartPrograms() []string {
	var names []string
	for _, n := range c.EnabledPrograms() {
		if c.Programs[n].Autostart {
			names = append(names, n)
		}
	}
	return names
}

// ShownKeys returns Keys followed by every program key of c
// ("programs.hermes.command"), programs by priority then name, fields in
// display order. The built-in executor has no command, user, directory
// or environment keys.
func (c *Config) ShownKeys() []string {
	keys := Keys()
	for _, n := range c.ProgramNames() {
		for _, f := range programFields {
			if n == ExecutorProgram && slices.Contains(executorFixed, f.name) {
				continue
			}
			keys = append(keys, "programs."+n+"."+f.name)
		}
	}
	return keys
}

// programValue returns the value of a programs.<name>.<field> key, or nil.
func (c *Config) programValue(key string) any {
	rest, ok := strings.CutPrefix(key, "programs.")
	if !ok {
		return nil
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return nil
	}
	p, ok := c.Programs[rest[:i]]
	if !ok {
		return nil
	}
	for _, f := range programFields {
		if f.name == rest[i+1:] {
			switch v := f.field(&p).(type) {
			case *[]int:
				return slices.Clone(*v)
			case *[]string:
				return slices.Clone(*v)
			case *map[string]string:
				return maps.Clone(*v)
			case *string:
				return *v
			case *int:
				return *v
			case *int64:
				return *v
			case *bool:
				return *v
			}
		}
	}
	return nil
}

// fileProgram is one programs.<name> entry of the config file: its raw
// fields and the file it came from.
type fileProgram struct {
	fields map[string]rawValue
	src    Source
}

// programFieldNames are the names of programFields, in display order.
func programFieldNames() []string {
	names := make([]string, len(programFields))
	for i, f := range programFields {
		names[i] = f.name
	}
	return names
}

// readPrograms reads the programs section of the YAML file data with
// yaml.v3 (viper would lowercase environment names). It returns the raw
// fields by program and a problem for each unknown field or bad shape.
func readPrograms(data []byte, src Source) (map[string]fileProgram, []*Problem) {
	var doc map[string]any
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return nil, nil // viper reported it
	}
	raw, ok := doc["programs"]
	if !ok || raw == nil {
		return nil, nil
	}
	progs, ok := raw.(map[string]any)
	if !ok {
		return nil, []*Problem{{Key: "programs", Value: showRaw(raw), Rule: "is not a mapping of programs", Source: src}}
	}
	out := map[string]fileProgram{}
	var probs []*Problem
	for _, name := range slices.Sorted(maps.Keys(progs)) {
		fields, ok := progs[name].(map[string]any)
		if !ok && progs[name] != nil {
			probs = append(probs, &Problem{Key: "programs." + name, Value: showRaw(progs[name]), Rule: "is not a mapping of keys", Source: src})
			continue
		}
		vals := map[string]rawValue{}
		for _, f := range slices.Sorted(maps.Keys(fields)) {
			if !slices.Contains(programFieldNames(), f) {
				probs = append(probs, &Problem{Key: "programs." + name + "." + f, Rule: "unknown key" + suggest.DidYouMean(f, programFieldNames()), Source: src})
				continue
			}
			if fields[f] != nil {
				vals[f] = rawValue{fields[f], src}
			}
		}
		out[name] = fileProgram{vals, src}
	}
	return out, probs
}

// loadPrograms merges the file's programs onto the defaults, records the
// sources (a file program's own key, "programs.<name>", names the file it
// is declared in) and returns the decode problems. failed collects keys
// that did not decode.
func loadPrograms(file map[string]fileProgram, srcs *Sources, failed map[string]bool) (map[string]Program, []*Problem) {
	progs := defaultPrograms()
	var probs []*Problem
	for name, fp := range file {
		if _, ok := progs[name]; !ok {
			progs[name] = defaultProgram(name)
		}
		srcs.byKey["programs."+name] = fp.src
	}
	for name, p := range progs {
		for _, f := range programFields {
			key := "programs." + name + "." + f.name
			srcs.byKey[key] = Source{Kind: SourceDefault}
			rv, ok := file[name].fields[f.name]
			if !ok {
				continue
			}
			v, rule := f.decode(rv.v)
			if rule != "" {
				probs = append(probs, &Problem{Key: key, Value: showRaw(rv.v), Rule: rule, Source: rv.src})
				failed[key] = true
				continue
			}
			switch ptr := f.field(&p).(type) {
			case *[]int:
				*ptr = v.([]int)
			default:
				set(ptr, v)
			}
			srcs.byKey[key] = rv.src
		}
		progs[name] = withContractEnvironment(name, p)
	}
	return progs, probs
}

// contractEnvironment is what a built-in program's environment always
// holds, also when programs.<name>.environment replaces the default map:
// the Hermes gateway must be told it is supervised, or an in-chat
// /restart or /update spawns a detached helper outside hbx (its
// contract; MISSION.md "The Hermes gateway's contract").
var contractEnvironment = map[string]map[string]string{
	"hermes": {"HERMES_GATEWAY_EXTERNAL_SUPERVISOR": "1"},
}

// withContractEnvironment returns p with name's contractEnvironment
// variables added where its environment does not set them (one set to
// another value is left for validateProgramFields to refuse).
func withContractEnvironment(name string, p Program) Program {
	need := contractEnvironment[name]
	if len(need) == 0 {
		return p
	}
	env := maps.Clone(p.Environment)
	if env == nil {
		env = map[string]string{}
	}
	for k, v := range need {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	p.Environment = env
	return p
}

// decodeArgv accepts a YAML list of strings or a string split like a shell.
func decodeArgv(raw any) (any, string) {
	if s, ok := raw.(string); ok {
		args, err := SplitCommand(s)
		if err != "" {
			return nil, err
		}
		return args, ""
	}
	v, rule := decodeList(raw)
	if rule != "" {
		return nil, "is not a command (want a string or a list of strings)"
	}
	return v, ""
}

// SplitCommand splits s into words as a POSIX shell would without any
// expansion: blanks separate words, single quotes keep everything, double
// quotes keep everything but \" and \\, a backslash outside quotes escapes
// the next character. It returns the rule broken ("has an unclosed
// quote") on failure.
func SplitCommand(s string) ([]string, string) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, "has an unclosed quote"
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, "has an unclosed quote"
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	if out == nil {
		out = []string{}
	}
	return out, ""
}

// decodeEnvironment accepts a YAML mapping or a list of KEY=VALUE.
func decodeEnvironment(raw any) (any, string) {
	out := map[string]string{}
	switch r := raw.(type) {
	case map[string]any:
		for k, v := range r {
			switch v.(type) {
			case string, int, int64, uint64, bool, float64:
				out[k] = fmt.Sprint(v)
			default:
				return nil, "is not a mapping of strings"
			}
		}
	case []any:
		for _, it := range r {
			s, ok := it.(string)
			k, v, found := strings.Cut(s, "=")
			if !ok || !found || k == "" {
				return nil, "is not a list of KEY=VALUE"
			}
			out[k] = v
		}
	default:
		return nil, "is not an environment (want a mapping or a list of KEY=VALUE)"
	}
	return out, ""
}

// decodeAutorestart accepts true, false (YAML booleans or strings) and
// "unexpected".
func decodeAutorestart(raw any) (any, string) {
	switch r := raw.(type) {
	case bool:
		return strconv.FormatBool(r), ""
	case string:
		return strings.ToLower(r), ""
	}
	return nil, "is not true, false or unexpected"
}

// decodeIntList accepts a YAML list of integers, one integer, or "0,2".
func decodeIntList(raw any) (any, string) {
	var items []any
	switch r := raw.(type) {
	case []any:
		items = r
	case string:
		for s := range strings.SplitSeq(r, ",") {
			items = append(items, strings.TrimSpace(s))
		}
	default:
		items = []any{r}
	}
	out := []int{}
	for _, it := range items {
		n, ok := toInt(it)
		if !ok {
			return nil, "is not a list of integers"
		}
		out = append(out, int(n))
	}
	return out, ""
}

// stopSignals are the signal names supervisord accepts for stopsignal.
var stopSignals = []string{"TERM", "HUP", "INT", "QUIT", "KILL", "USR1", "USR2"}

// stopSignalName is a stopsignal value as stopSignals spells it: upper
// case, without "SIG" ("sigint" and "INT" are both "INT").
func stopSignalName(v string) string { return strings.TrimPrefix(strings.ToUpper(v), "SIG") }

// StopSignalNum is StopSignal as the signal to send, however it is
// spelled ("TERM", "sigterm", "SIGTERM"); 0 (which the supervisor and the
// data lock read as SIGTERM) for a name not in stopSignals, which Load
// refuses.
func (p Program) StopSignalNum() syscall.Signal {
	n := stopSignalName(p.StopSignal)
	if !slices.Contains(stopSignals, n) {
		return 0
	}
	return unix.SignalNum("SIG" + n)
}

// validatePrograms checks the supervisor.* keys and every program.
func validatePrograms(c *Config, srcs *Sources, skip map[string]bool) []*Problem {
	ps := &collector{srcs: srcs, skip: skip}
	validateSupervisor(ps, &c.Supervisor)
	for _, name := range c.ProgramNames() {
		validateProgram(ps, c, name)
	}
	if cyc := dependencyCycle(c); cyc != nil {
		ps.add("programs."+cyc[0]+".depends_on", "", "is a dependency cycle: "+strings.Join(cyc, " -> "))
	}
	return ps.list
}

// collector collects Problems, each with its key's source.
type collector struct {
	list []*Problem
	srcs *Sources
	skip map[string]bool // keys already reported (a value that did not parse)
}

// add records that value of key breaks rule, unless key is skipped.
func (ps *collector) add(key, value, rule string) { ps.addAs(key, key, value, rule) }

// addAs records that value of key breaks rule, naming the source of
// srcKey (a map's key for one of its entries), unless srcKey is skipped.
func (ps *collector) addAs(srcKey, key, value, rule string) {
	if !ps.skip[srcKey] {
		ps.list = append(ps.list, &Problem{Key: key, Value: value, Rule: rule, Source: ps.srcs.Of(srcKey)})
	}
}

// always records that value of key breaks rule.
func (ps *collector) always(key, value, rule string) {
	ps.list = append(ps.list, &Problem{Key: key, Value: value, Rule: rule, Source: ps.srcs.Of(key)})
}

// validateSupervisor checks the supervisor.* keys.
func validateSupervisor(ps *collector, sv *Supervisor) {
	q := strconv.Quote
	if !filepath.IsAbs(sv.Socket) {
		ps.add("supervisor.socket", q(sv.Socket), ruleNotAbs)
	} else if len(sv.Socket) > 107 {
		ps.add("supervisor.socket", q(sv.Socket), fmt.Sprintf("is %d bytes long (a unix socket path has at most 107)", len(sv.Socket)))
	}
	if !filepath.IsAbs(sv.LogDir) {
		ps.add("supervisor.log_dir", q(sv.LogDir), ruleNotAbs)
	}
	if sv.HealthWait <= 0 {
		ps.add("supervisor.health_wait", sv.HealthWait.String(), "is not positive")
	}
	if sv.HealthInterval <= 0 {
		ps.add("supervisor.health_interval", sv.HealthInterval.String(), "is not positive")
	}
	if sv.WedgeFailures < 0 {
		ps.add("supervisor.wedge_failures", strconv.Itoa(sv.WedgeFailures), ruleNegative)
	}
}

// validateProgram checks programs.<name>: its name, its command, its
// fields and, when enabled, its dependencies.
func validateProgram(ps *collector, c *Config, name string) {
	if !names.Program(name) {
		ps.always("programs."+name, "", `is not a program name (want lowercase letters, digits, '-' and '_', not "all")`)
		return
	}
	p := c.Programs[name]
	validateCommand(ps, c, name, p)
	validateProgramFields(ps, name, p)
	if p.Enabled {
		for _, d := range p.DependsOn {
			dp, ok := c.Programs[d]
			switch {
			case !ok:
				ps.add("programs."+name+".depends_on", strconv.Quote(d), "is not a program"+suggest.DidYouMean(d, knownPrograms(c)))
			case !dp.Enabled:
				ps.add("programs."+name+".depends_on", strconv.Quote(d), "is a disabled program")
			}
		}
	}
}

// validateCommand checks who may set programs.<name>.command: not the
// built-in executor; a new program needs one, enabled or not; an enabled
// one needs a non-empty one.
func validateCommand(ps *collector, c *Config, name string, p Program) {
	k := func(f string) string { return "programs." + name + "." + f }
	switch {
	case name == ExecutorProgram:
		for _, f := range executorFixed {
			if src := ps.srcs.Of(k(f)); src.Kind != SourceDefault && src.Kind != "" {
				ps.add(k(f), "", "cannot be set for the built-in executor (it runs the active release, ready when health.readiness passes; see executor.*)")
			}
		}
	case !slices.Contains(builtinPrograms, name) && len(p.Command) == 0 && !ps.skip[k("command")]:
		// A typo of a built-in ("hermse") declares a new program: it
		// needs a command, enabled or not, and gets a suggestion.
		hint := suggest.DidYouMean(name, knownPrograms(c))
		if hint == "" {
			hint = " (want programs." + name + ".command)"
		}
		ps.always("programs."+name, "", "is not a built-in program ("+strings.Join(builtinPrograms, ", ")+") and has no command"+hint)
	case p.Enabled && len(p.Command) == 0:
		ps.add(k("command"), "[]", "is empty (want the program to run)")
	}
}

// validateProgramFields checks the values of programs.<name>'s other
// fields.
func validateProgramFields(ps *collector, name string, p Program) {
	k := func(f string) string { return "programs." + name + "." + f }
	q := strconv.Quote
	if !slices.Contains([]string{"true", "false", "unexpected"}, p.Autorestart) {
		ps.add(k("autorestart"), q(p.Autorestart), "is not true, false or unexpected")
	}
	validateExitCodes(ps, name, p)
	validateReadiness(ps, name, p)
	for _, f := range []struct {
		name string
		v    int
	}{{"startsecs", p.StartSecs}, {"startretries", p.StartRetries}, {"stopwaitsecs", p.StopWaitSecs}, {"logfile_backups", p.LogfileBackups}} {
		if f.v < 0 {
			ps.add(k(f.name), strconv.Itoa(f.v), ruleNegative)
		}
	}
	if !slices.Contains(stopSignals, stopSignalName(p.StopSignal)) {
		ps.add(k("stopsignal"), q(p.StopSignal), "is not a signal name (want TERM, HUP, INT, QUIT, KILL, USR1 or USR2)")
	}
	for _, f := range []struct{ name, v string }{{"directory", p.Directory}, {"stdout_logfile", p.StdoutLogfile}, {"stderr_logfile", p.StderrLogfile}} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			ps.add(k(f.name), q(f.v), ruleNotAbs)
		}
	}
	switch {
	case p.LogfileMaxBytes < 0:
		ps.add(k("logfile_maxbytes"), strconv.FormatInt(p.LogfileMaxBytes, 10), ruleNegative)
	case p.LogfileMaxBytes%(1<<20) != 0:
		ps.add(k("logfile_maxbytes"), strconv.FormatInt(p.LogfileMaxBytes, 10), "is not a whole number of MiB (log rotation counts in MiB, e.g. 50MiB)")
	}
	for _, e := range slices.Sorted(maps.Keys(p.Environment)) {
		if !names.EnvVar(e) {
			ps.add(k("environment"), q(e), "is not an environment variable name")
		}
		if v, ok := contractEnvironment[name][e]; ok && p.Environment[e] != v {
			ps.add(k("environment"), q(e+"="+p.Environment[e]), "must be "+e+"="+v+" for "+name+" (its contract: it must be told it is supervised; leave it out and hbx sets it)")
		}
	}
}

// validateExitCodes checks programs.<name>.exitcodes, restart_exitcodes
// and fatal_exitcodes: codes 0-255, and no code both a restart and a
// fatal one.
func validateExitCodes(ps *collector, name string, p Program) {
	k := func(f string) string { return "programs." + name + "." + f }
	for _, f := range []struct {
		name  string
		codes []int
	}{{"exitcodes", p.ExitCodes}, {"restart_exitcodes", p.RestartExitCodes}, {"fatal_exitcodes", p.FatalExitCodes}} {
		for _, code := range f.codes {
			if code < 0 || code > 255 {
				ps.add(k(f.name), strconv.Itoa(code), "is not an exit code (want 0-255)")
			}
		}
	}
	for _, code := range p.RestartExitCodes {
		if slices.Contains(p.FatalExitCodes, code) && code >= 0 && code <= 255 {
			ps.add(k("restart_exitcodes"), strconv.Itoa(code), "is also in fatal_exitcodes (a code is either a restart or a fatal one)")
		}
	}
}

// dependencyCycle returns one cycle among the enabled programs
// (first == last), or nil.
func dependencyCycle(c *Config) []string {
	state := map[string]int{} // 0 new, 1 on the path, 2 done
	var path []string
	var visit func(string) []string
	visit = func(n string) []string {
		state[n] = 1
		path = append(path, n)
		for _, d := range c.Programs[n].DependsOn {
			if dp, ok := c.Programs[d]; !ok || !dp.Enabled {
				continue
			}
			switch state[d] {
			case 1:
				i := slices.Index(path, d)
				return append(slices.Clone(path[i:]), d)
			case 0:
				if cyc := visit(d); cyc != nil {
					return cyc
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = 2
		return nil
	}
	for _, n := range slices.Sorted(maps.Keys(c.Programs)) {
		if c.Programs[n].Enabled && state[n] == 0 {
			if cyc := visit(n); cyc != nil {
				return cyc
			}
		}
	}
	return nil
}
