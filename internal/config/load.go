package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/regfile"
	"github.com/hermesbox/hbx/internal/suggest"
)

// LoadOptions says where Load finds the layers above the defaults.
type LoadOptions struct {
	// Path is the YAML config file; "" means DefaultPath.
	Path string
	// PathExplicit says the user named Path (--config): then a missing file
	// is an error, and ConfigEnv is not read. Otherwise a non-empty
	// ConfigEnv in Env names the file (a missing one is an error too); a
	// missing implicit file is fine. Sources.File says which file counted.
	PathExplicit bool
	// Env holds the environment as os.Environ returns it, "NAME=value".
	// Only names starting with EnvPrefix are read; for a repeated name the
	// last entry wins.
	Env []string
	// Flags holds the flags RegisterFlags added, parsed; only flags the user
	// set (Changed) count. Nil means no flags.
	Flags *pflag.FlagSet
}

// Load merges the defaults, the config file, the environment and the flags
// of opts (flags win, then environment, then file) and validates the
// result. It returns the effective Config and the Source of every key.
//
// Every error wraps ErrInvalid except a failure to read an existing file
// (permissions, I/O), which wraps the *fs.PathError. A missing file given
// explicitly, a file that is not YAML, unknown keys or HBX_* variables,
// values that do not decode and rule violations are all ErrInvalid; all
// problems found are reported at once (see Problems).
func Load(opts LoadOptions) (*Config, *Sources, error) {
	file := resolvePath(opts)
	fileVals, fileProgs, probs, err := readFile(&file)
	if err != nil {
		return nil, nil, err
	}
	envVals, envProbs := readEnv(opts.Env)
	probs = append(probs, envProbs...)
	flagVals := readFlags(opts.Flags)

	cfg := Defaults()
	srcs := &Sources{byKey: make(map[string]Source, len(keySpecs)), file: file}
	failed := map[string]bool{}
	for _, spec := range keySpecs {
		srcs.byKey[spec.name] = Source{Kind: SourceDefault}
		// Lowest precedence first: each layer that has the key overrides.
		// Every given value is decoded, so a bad one is reported even
		// when a higher layer overrides it.
		for _, layer := range []map[string]rawValue{fileVals, envVals, flagVals} {
			rv, ok := layer[spec.name]
			if !ok {
				continue
			}
			v, rule := decode(spec.kind, rv.v)
			if rule != "" {
				probs = append(probs, &Problem{Key: spec.name, Value: showRaw(rv.v), Rule: rule, Source: rv.src})
				failed[spec.name] = true
				continue
			}
			set(spec.field(&cfg), v)
			srcs.byKey[spec.name] = rv.src
		}
	}
	// An empty platform or user means the default, and says so.
	if cfg.Executor.Platform == "" && !failed["executor.platform"] {
		cfg.Executor.Platform = Defaults().Executor.Platform
		srcs.byKey["executor.platform"] = Source{Kind: SourceDefault}
	}
	if cfg.Executor.User == "" && !failed["executor.user"] {
		cfg.Executor.User = account.Default()
		srcs.byKey["executor.user"] = Source{Kind: SourceDefault}
	}
	progs, progProbs := loadPrograms(fileProgs, srcs, failed)
	cfg.Programs = progs
	probs = append(probs, progProbs...)
	probs = append(probs, validate(&cfg, srcs, failed)...)
	if err := problemsError(probs); err != nil {
		return nil, nil, err
	}
	return &cfg, srcs, nil
}

// resolvePath picks the config file of opts: the flag's, else ConfigEnv's,
// else opts.Path or DefaultPath.
func resolvePath(opts LoadOptions) File {
	switch {
	case opts.PathExplicit:
		return File{Path: opts.Path, Source: Source{Kind: SourceFlag, Detail: "--config"}}
	case lookupEnv(opts.Env, ConfigEnv) != "":
		return File{Path: lookupEnv(opts.Env, ConfigEnv), Source: Source{Kind: SourceEnv, Detail: ConfigEnv}}
	case opts.Path != "":
		return File{Path: opts.Path, Source: Source{Kind: SourceDefault}}
	}
	return File{Path: DefaultPath, Source: Source{Kind: SourceDefault}}
}

// lookupEnv returns the value of the last name=... entry of env, or "".
func lookupEnv(env []string, name string) string {
	val := ""
	for _, kv := range env {
		if n, v, ok := strings.Cut(kv, "="); ok && n == name {
			val = v
		}
	}
	return val
}

// RegisterFlags adds one flag per config key to fs, named by FlagName, e.g.
// --executor-port. Every flag takes its value as a string decoded like an
// environment variable; boolean keys may be given bare (--install-keep-blobs
// means true) or as --install-keep-blobs=false. Flags have no default of
// their own: Load uses a flag only when the user set it.
func RegisterFlags(fs *pflag.FlagSet) {
	for _, spec := range keySpecs {
		f := fs.VarPF(&rawFlag{kind: spec.kind}, FlagName(spec.name), "", spec.usage)
		if spec.kind == kindBool {
			f.NoOptDefVal = "true"
		}
	}
}

// rawFlag is a pflag.Value that keeps the text it is given for Load.
type rawFlag struct {
	kind kind
	val  string
}

// String returns the flag's text as given.
func (f *rawFlag) String() string { return f.val }

// Set stores s; decoding waits for Load, which reports every problem at once.
func (f *rawFlag) Set(s string) error { f.val = s; return nil }

// Type names the value in help: "int", "duration", "list", ...
func (f *rawFlag) Type() string { return f.kind.String() }

// rawValue is one undecoded value and where it came from.
type rawValue struct {
	v   any // string from env and flags; YAML scalar, []any or map[string]any from the file
	src Source
}

// readFile reads the YAML file f names with viper and sets f.Read when it
// exists. It returns the known keys' values, the programs section (see
// readPrograms) and a problem for every unknown key. A missing file is
// fine only when its path is the default.
func readFile(f *File) (map[string]rawValue, map[string]fileProgram, []*Problem, error) {
	path := f.Path
	data, err := regfile.ReadFile(path, maxConfigBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist) && f.Source.Kind == SourceDefault:
		return nil, nil, nil, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, nil, fmt.Errorf("%w: config file %s (from %s) does not exist", ErrInvalid, path, f.Source)
	case errors.Is(err, regfile.ErrNotRegular):
		return nil, nil, nil, fmt.Errorf("%w: config file %s (from %s): %w", ErrInvalid, path, f.Source, err)
	case err != nil:
		return nil, nil, nil, fmt.Errorf("read config file: %w", err)
	}
	f.Read = true
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		// viper prefixes "While parsing config: "; the line says that.
		msg := strings.TrimPrefix(err.Error(), "While parsing config: ")
		if strings.Contains(msg, "cannot start any token") && bytes.ContainsRune(data, '\t') {
			msg += " (a tab: YAML indents with spaces)"
		}
		return nil, nil, nil, fmt.Errorf("%w: parse config file %s: %s", ErrInvalid, path, msg)
	}
	src := Source{Kind: SourceFile, Detail: path}
	vals, probs := fileValues(v, src)
	progs, progProbs := readPrograms(data, src)
	probs = append(probs, caseProblems(data, src)...)
	return vals, progs, append(probs, progProbs...), nil
}

// fileValues sorts the keys viper read from the file: the known keys'
// values (a map key as a whole), and a problem for a section that is not
// a mapping and for an unknown key (with a "did you mean"). Programs are
// left to readPrograms.
func fileValues(v *viper.Viper, src Source) (map[string]rawValue, []*Problem) {
	vals := map[string]rawValue{}
	var probs []*Problem
	allKeys := v.AllKeys()
	slices.Sort(allKeys)
	for _, k := range allKeys {
		spec, known := lookupKey(k)
		switch {
		case known && spec.kind == kindMap:
			// An empty map has no leaf keys; handled below.
		case known:
			if val := v.Get(k); val != nil {
				vals[k] = rawValue{val, src}
			}
		case parentMapKey(k) != "":
			// A subkey of a map key: the map is read as a whole below.
		case k == "programs" || strings.HasPrefix(k, "programs."):
			// Read by readPrograms.
		case slices.Contains(sections, k):
			if v.Get(k) != nil {
				probs = append(probs, &Problem{Key: k, Value: showRaw(v.Get(k)), Rule: "is not a mapping of keys", Source: src})
			}
		default:
			rule := "unknown key"
			if c := suggestKey(k); c != "" {
				rule += fmt.Sprintf(" (did you mean %q?)", c)
			}
			probs = append(probs, &Problem{Key: k, Rule: rule, Source: src})
		}
	}
	for _, spec := range keySpecs {
		if spec.kind == kindMap && v.InConfig(spec.name) {
			if val := v.Get(spec.name); val != nil {
				vals[spec.name] = rawValue{val, src}
			}
		}
	}
	return vals, probs
}

// suggestKey returns the known key or section closest to the unknown file
// key k, or "". A mistyped section is corrected on its own
// ("program.hermes.command" -> "programs.hermes.command").
func suggestKey(k string) string {
	if c := suggest.Closest(k, append(Keys(), sections...)); c != "" {
		return c
	}
	sec, rest, ok := strings.Cut(k, ".")
	if !ok || slices.Contains(sections, sec) {
		return ""
	}
	c := suggest.Closest(sec, sections)
	if c == "" {
		return ""
	}
	if c == "programs" {
		return c + "." + rest
	}
	return suggest.Closest(c+"."+rest, Keys())
}

// parentMapKey returns the map key k is a subkey of, or "".
func parentMapKey(k string) string {
	for _, spec := range keySpecs {
		if spec.kind == kindMap && strings.HasPrefix(k, spec.name+".") {
			return spec.name
		}
	}
	return ""
}

// readEnv picks the HBX_* variables out of env. Unknown ones are problems.
func readEnv(env []string) (map[string]rawValue, []*Problem) {
	byName := make(map[string]string, len(keySpecs))
	names := []string{ConfigEnv}
	for _, spec := range keySpecs {
		byName[EnvName(spec.name)] = spec.name
		names = append(names, EnvName(spec.name))
	}
	vals := map[string]rawValue{}
	var unknown []string
	for _, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) || name == ConfigEnv {
			continue
		}
		key, ok := byName[name]
		if !ok {
			if !slices.Contains(unknown, name) {
				unknown = append(unknown, name)
			}
			continue
		}
		vals[key] = rawValue{val, Source{Kind: SourceEnv, Detail: name}}
	}
	slices.Sort(unknown)
	var probs []*Problem
	for _, name := range unknown {
		hint := suggest.DidYouMean(name, names)
		if hint == "" {
			hint = " (want " + ConfigEnv + " or " + EnvPrefix + "<SECTION>_<KEY>, e.g. " + EnvName("executor.image") + ")"
		}
		probs = append(probs, &Problem{Key: name, Rule: "unknown environment variable" + hint})
	}
	return vals, probs
}

// readFlags returns the values of the key flags the user set.
func readFlags(fs *pflag.FlagSet) map[string]rawValue {
	vals := map[string]rawValue{}
	if fs == nil {
		return vals
	}
	for _, spec := range keySpecs {
		name := FlagName(spec.name)
		if f := fs.Lookup(name); f != nil && f.Changed {
			vals[spec.name] = rawValue{f.Value.String(), Source{Kind: SourceFlag, Detail: "--" + name}}
		}
	}
	return vals
}

// set stores the decoded v in the field ptr points to; decode's result type
// always matches the field's.
func set(ptr, v any) {
	switch p := ptr.(type) {
	case *string:
		*p = v.(string)
	case *int:
		*p = v.(int)
	case *int64:
		*p = v.(int64)
	case *bool:
		*p = v.(bool)
	case *time.Duration:
		*p = v.(time.Duration)
	case *[]string:
		*p = v.([]string)
	case *map[string]string:
		*p = v.(map[string]string)
	}
}

// decode turns raw into k's Go type. On failure it returns the rule broken,
// e.g. "is not an integer".
func decode(k kind, raw any) (any, string) {
	switch k {
	case kindString:
		switch r := raw.(type) {
		case string:
			return r, ""
		case int, int64, uint64:
			return fmt.Sprint(r), ""
		}
		return nil, "is not a string"
	case kindInt:
		n, ok := toInt(raw)
		if !ok {
			return nil, "is not an integer"
		}
		if n < math.MinInt || n > math.MaxInt {
			return nil, "is out of range"
		}
		return int(n), ""
	case kindBool:
		switch r := raw.(type) {
		case bool:
			return r, ""
		case string:
			if b, err := strconv.ParseBool(r); err == nil {
				return b, ""
			}
		}
		return nil, "is not a boolean (want true or false)"
	case kindDuration:
		s, ok := raw.(string)
		if n, isInt := raw.(int); isInt { // YAML 0; other integers lack a unit
			s, ok = strconv.Itoa(n), true
		}
		if ok {
			if d, err := time.ParseDuration(s); err == nil {
				return d, ""
			}
		}
		return nil, "is not a duration (want Go syntax, e.g. 30s or 1m30s)"
	case kindBytes:
		if s, ok := raw.(string); ok {
			if n, ok := parseBytes(s); ok {
				return n, ""
			}
		} else if n, ok := toInt(raw); ok {
			return n, ""
		}
		return nil, "is not a size (want bytes, or an integer with KiB, MiB, GiB or TiB)"
	case kindList:
		return decodeList(raw)
	case kindMap:
		return decodeMap(raw)
	}
	return nil, "has an unknown type"
}

// toInt returns raw as an int64 when it is an integer or a decimal string.
func toInt(raw any) (int64, bool) {
	switch r := raw.(type) {
	case int:
		return int64(r), true
	case int64:
		return r, true
	case uint64:
		if r > math.MaxInt64 {
			return 0, false
		}
		return int64(r), true
	case string:
		n, err := strconv.ParseInt(r, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// byteUnits are the suffixes parseBytes accepts, longest first.
var byteUnits = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}

// parseBytes parses "17179869184", "16GiB" or "512 MiB" into bytes.
func parseBytes(s string) (int64, bool) {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = strings.TrimSpace(rest), u.shift
			break
		}
	}
	if num == "" || strings.Trim(num, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64>>shift {
		return 0, false
	}
	return n << shift, true
}

// decodeList accepts a YAML sequence of strings or a comma-separated string.
func decodeList(raw any) (any, string) {
	var items []string
	switch r := raw.(type) {
	case []any:
		for _, it := range r {
			s, ok := it.(string)
			if !ok {
				return nil, "is not a list of strings"
			}
			items = append(items, s)
		}
	case []string:
		items = r
	case string:
		if r != "" {
			items = strings.Split(r, ",")
		}
	default:
		return nil, "is not a list (want a YAML sequence or a,b,c)"
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		it = strings.TrimSpace(it)
		if it == "" {
			return nil, "has an empty item"
		}
		out = append(out, it)
	}
	return out, ""
}

// decodeMap accepts a YAML mapping of strings or "k=v,k=v".
func decodeMap(raw any) (any, string) {
	out := map[string]string{}
	switch r := raw.(type) {
	case map[string]any:
		for k, v := range r {
			s, ok := v.(string)
			if !ok {
				return nil, "is not a mapping of strings"
			}
			out[k] = s
		}
	case string:
		if r == "" {
			return out, ""
		}
		for item := range strings.SplitSeq(r, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok || k == "" || v == "" {
				return nil, "is not a list of key=value items"
			}
			if _, dup := out[k]; dup {
				return nil, fmt.Sprintf("has key %q twice", k)
			}
			out[k] = v
		}
	default:
		return nil, "is not a mapping (want a YAML mapping or k=v,k=v)"
	}
	return out, ""
}

// showRaw renders a raw value for a Problem in YAML flow style: strings
// quoted (also inside lists and mappings, so an empty or blank item shows:
// ["", "x"]), mappings with sorted keys, the rest as Go prints them.
func showRaw(raw any) string {
	switch r := raw.(type) {
	case string:
		return strconv.Quote(r)
	case []string:
		items := make([]string, len(r))
		for i, it := range r {
			items[i] = strconv.Quote(it)
		}
		return "[" + strings.Join(items, ", ") + "]"
	case []any:
		items := make([]string, len(r))
		for i, it := range r {
			items[i] = showRaw(it)
		}
		return "[" + strings.Join(items, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(r))
		for k := range r {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		items := make([]string, len(keys))
		for i, k := range keys {
			items[i] = strconv.Quote(k) + ": " + showRaw(r[k])
		}
		return "{" + strings.Join(items, ", ") + "}"
	}
	return fmt.Sprint(raw)
}

// maxConfigBytes bounds the config file hbx reads (and rewrites with a
// pin): a config is a few kilobytes; anything this large is a mistake.
const maxConfigBytes = 4 << 20
