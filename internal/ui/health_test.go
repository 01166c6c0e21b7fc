package ui

import (
	"testing"
	"time"

	"github.com/hermesbox/hbx/health"
)

// TestHealthText: hbx health's lines (status, padded name, duration,
// reason).
func TestHealthText(t *testing.T) {
	rep := &health.Report{Status: health.Fail, Checks: []health.Result{
		{Name: health.CheckAPIHealth, Status: health.Pass, Duration: 12 * time.Millisecond, Reason: "200, status ok"},
		{Name: health.CheckRelease, Status: health.Fail, Duration: 3 * time.Millisecond, Reason: "not the configured image"},
		{Name: health.CheckMCPTools, Status: health.Skip, Reason: "no key"},
	}}
	want := "pass  api-health     12ms  200, status ok\n" +
		"fail  release         3ms  not the configured image\n" +
		"skip  mcp-tools       0ms  no key\n"
	if got := HealthText(rep); got != want {
		t.Errorf("HealthText() =\n%q, want\n%q", got, want)
	}
	if got := HealthText(&health.Report{Status: health.Pass}); got != "" {
		t.Errorf("HealthText(no checks) = %q, want \"\"", got)
	}
}
