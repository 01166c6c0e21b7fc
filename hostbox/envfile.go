// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"fmt"
	"slices"
	"strings"
)

// Var is one line KEY=VALUE of a box's .env.
type Var struct {
	Key, Value string
}

// Env is a box's .env in file order.
type Env []Var

// Get returns the value of key ("" when absent).
func (e Env) Get(key string) string {
	for _, v := range e {
		if v.Key == key {
			return v.Value
		}
	}
	return ""
}

// Set replaces key's value, or appends the variable.
func (e Env) Set(key, value string) Env {
	for i, v := range e {
		if v.Key == key {
			e[i].Value = value
			return e
		}
	}
	return append(e, Var{key, value})
}

// validKey accepts a shell-style variable name in upper case.
func validKey(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ValidateVar accepts a variable .env can hold literally: an upper-case
// name, a value without a newline, NUL or single quote and not ending in
// a backslash (values are written single-quoted, which Compose reads
// without interpolation, but it reads \' as an escaped quote: the value
// would run on into the next line). Errors wrap ErrInvalid.
func ValidateVar(v Var) error {
	if !validKey(v.Key) {
		return fmt.Errorf("variable %q: want a name of A-Z, 0-9 and '_', not starting with a digit: %w", v.Key, ErrInvalid)
	}
	if strings.ContainsAny(v.Value, "'\n\r\x00") {
		return fmt.Errorf("variable %s: its value holds a quote, newline or NUL, which .env cannot hold literally: %w", v.Key, ErrInvalid)
	}
	if strings.HasSuffix(v.Value, `\`) {
		return fmt.Errorf("variable %s: its value ends in a backslash, which Compose would read with the closing quote as an escaped quote: %w", v.Key, ErrInvalid)
	}
	return nil
}

// newSets are the variables hbx box new writes itself from its flags and
// the box directory; --set cannot replace them (BIND_ADDRESS is --bind:
// the port is checked free on that address).
var newSets = []string{"BOX", "HOST_PORT", "BIND_ADDRESS", "MCP_KEY_FILE", "BACKUP_PASSPHRASE_FILE"}

// CheckSetVar refuses a --set variable that new writes itself (newSets)
// or that Compose or the docker CLI read as their own settings from a
// project's .env (COMPOSE_*, DOCKER_*: COMPOSE_PROJECT_NAME would point
// the box at another project's containers and volumes, COMPOSE_FILE at
// another compose file). Errors wrap ErrInvalid.
func CheckSetVar(v Var) error {
	if slices.Contains(newSets, v.Key) {
		return fmt.Errorf("variable %s: hbx box new sets it: %w", v.Key, ErrInvalid)
	}
	if strings.HasPrefix(v.Key, "COMPOSE_") || strings.HasPrefix(v.Key, "DOCKER_") {
		return fmt.Errorf("variable %s: Compose and the docker CLI read COMPOSE_* and DOCKER_* from .env as their own settings; a box's .env does not set them: %w", v.Key, ErrInvalid)
	}
	return nil
}

// ParseVar parses KEY=VALUE (a --set flag) and validates it.
func ParseVar(s string) (Var, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return Var{}, fmt.Errorf("variable %q: want KEY=VALUE: %w", s, ErrInvalid)
	}
	out := Var{k, v}
	return out, ValidateVar(out)
}

// Format renders e as a .env file, each value single-quoted.
func (e Env) Format(header string) ([]byte, error) {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(header), "\n") {
		b.WriteString("# " + l + "\n")
	}
	for _, v := range e {
		if err := ValidateVar(v); err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s='%s'\n", v.Key, v.Value)
	}
	return []byte(b.String()), nil
}

// ParseEnv reads a .env file: blank lines and lines starting with '#' are
// skipped; every other line is KEY=VALUE, VALUE bare or in single or
// double quotes (taken literally: no escapes, no interpolation). A line
// of another shape is an error naming its number, wrapping ErrInvalid.
func ParseEnv(data []byte) (Env, error) {
	var e Env
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !validKey(k) {
			return nil, fmt.Errorf("line %d: want KEY=VALUE: %w", i+1, ErrInvalid)
		}
		if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') {
			if v[len(v)-1] != v[0] {
				return nil, fmt.Errorf("line %d: %s: unterminated quote: %w", i+1, k, ErrInvalid)
			}
			v = v[1 : len(v)-1]
		}
		e = e.Set(k, v)
	}
	return e, nil
}
