package config

import "github.com/hermesbox/hbx/internal/suggest"

// Closest is suggest.Closest, kept for the callers in internal/box and
// cmd/hbx until they are moved (issue 26); new code imports
// internal/suggest.
func Closest(s string, candidates []string) string {
	return suggest.Closest(s, candidates)
}
