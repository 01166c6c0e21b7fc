// Package names holds the grammar of the names hbx accepts from its
// configuration and hands to the processes it runs: program names (the
// config validates them, the supervisor refuses a program without one)
// environment variable names (programs' environment, executor.env_file)
// and MCP bearer keys (executor.token_file, health.token_file).
// It is the one owner of each rule; it does no I/O.
package names

import "strings"

// ExecutorProgram is the name of the built-in supervised program that runs
// the active release; internal/config names it config.ExecutorProgram.
const ExecutorProgram = "executor"

// Program reports whether s may name a supervised program: 1-64
// characters of lowercase letters, digits, '-' and '_', starting with a
// letter or digit, and not "all" (the control commands' word for every
// program).
func Program(s string) bool {
	if s == "" || s == "all" || len(s) > 64 {
		return false
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_')) {
			return false
		}
	}
	return true
}

// EnvVar reports whether s may name an environment variable: ASCII
// letters, digits and '_', not starting with a digit (POSIX's portable
// names, either case).
func EnvVar(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// BearerKey reports whether s may be an MCP bearer key: RFC 6750's
// b64token, one or more ASCII letters, digits, '-', '.', '_', '~', '+'
// or '/', then any '=' padding (hex, base64 and base64url keys all fit),
// at most MaxBearerKey bytes.
// Such a key reaches the payload unchanged both through an environment
// variable (executor.token_file) and through an Authorization header
// (health.token_file); anything else, a non-ASCII letter above all, is
// decoded differently on the two ways.
func BearerKey(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" || len(s) > MaxBearerKey {
		return false
	}
	for _, c := range body {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~+/", c)) {
			return false
		}
	}
	return true
}

// MaxBearerKey bounds an MCP bearer key, in bytes: far above a 256-bit
// key in any encoding, well below the header limits of HTTP servers
// (Bun's is 16 KiB).
const MaxBearerKey = 4096
