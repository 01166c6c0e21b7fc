package backup

import (
	"strings"
	"testing"
)

// TestPlanRestoreSaysWhoGetsTheOwner: hbx backup verify's "owners:" line
// says which entries get executor.user (the data directory, and the
// entries owned like the archive's root) in words an operator can read;
// it read "the entries the archive gave its owner".
func TestPlanRestoreSaysWhoGetsTheOwner(t *testing.T) {
	tests := []struct {
		name          string
		authenticated bool
		want          string
	}{
		{"authenticated", true, "uid 999 gid 995 (executor.user) for the data directory and every entry the archive gives the data directory's owner; other entries keep the archive's owners"},
		{"not authenticated", false, "every entry of the data directory: uid 999 gid 995 (executor.user); the archive is not authenticated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanRestore(RestoreOptions{DataDir: t.TempDir(), Owner: Owner{UID: 999, GID: 995}}, nil, tc.authenticated)
			if p.Owners != tc.want {
				t.Errorf("Owners = %q, want %q", p.Owners, tc.want)
			}
			if strings.Contains(p.Owners, "gave its owner") {
				t.Errorf("Owners = %q: the old, unclear wording", p.Owners)
			}
		})
	}
}
