package ui

import (
	"fmt"
	"strings"

	"github.com/hermesbox/hbx/health"
)

// HealthText is hbx health's text: one line per check of r, status, name
// (padded to the longest name), duration in milliseconds (padded to 5
// digits) and reason, each line ending in "\n". --json prints r itself
// (health.Report's JSON).
func HealthText(r *health.Report) string {
	width := 0
	for _, c := range r.Checks {
		width = max(width, len(c.Name))
	}
	var b strings.Builder
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%-4s  %-*s  %5dms  %s\n", c.Status, width, c.Name, c.Duration.Milliseconds(), c.Reason)
	}
	return b.String()
}
