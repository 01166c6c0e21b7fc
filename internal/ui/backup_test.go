package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/backup"
)

// TestBackupTextCounts: hbx backup, restore and backup verify say "1
// file" and "1 entry" for one, the plural otherwise.
func TestBackupTextCounts(t *testing.T) {
	for _, tc := range []struct {
		n          int
		file, entr string
	}{{0, "0 files", "0 entries"}, {1, "1 file ", "1 entry,"}, {2, "2 files", "2 entries"}} {
		made := BackupText(&backup.Result{Path: "/b/a.tar.gz.gpg", Files: tc.n, Encrypted: true, Duration: time.Second}, false)
		restored := RestoreText(&backup.RestoreResult{Files: tc.n}, "/b/a.tar.gz.gpg", "")
		verified := VerifyText(&backup.VerifyResult{Path: "/b/a.tar.gz.gpg", Entries: tc.n, Files: tc.n}, nil)
		for what, text := range map[string]string{"backup": made, "restore": restored, "verify": verified} {
			if !strings.Contains(text, tc.file) {
				t.Errorf("%s of %d files says %q, want %q", what, tc.n, text, tc.file)
			}
		}
		if !strings.Contains(verified, tc.entr) {
			t.Errorf("verify of %d entries says %q, want %q", tc.n, verified, tc.entr)
		}
	}
}

// TestRestoreTextRuntimeChanged: a restore that switched the release
// says it activated the archive's runtime, not that it installed one (a
// restore onto the previous release reuses it in place).
func TestRestoreTextRuntimeChanged(t *testing.T) {
	got := RestoreText(&backup.RestoreResult{Files: 2, RuntimeChanged: true, Pinned: "r/x:v2@sha256:bb", PinnedOver: "r/x:v1@sha256:aa"}, "/b/a.tar.gz.gpg", "/etc/hbx/hbx.yaml")
	for _, want := range []string{"  activated the runtime the archive was written by (installed, or the previous release reused)\n",
		"  pinned r/x:v2@sha256:bb in /etc/hbx/hbx.yaml (it named r/x:v1@sha256:aa)\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("RestoreText(runtime changed) = %q, want it to contain %q", got, want)
		}
	}
}

// TestVerifyTextSaysWhatRestoreChanges: hbx backup verify says whether
// the archive is authenticated and what hbx restore of it would change,
// or why it would refuse it (issue 25 item 1: it said "ok" of an archive
// that would have replaced the runtime).
func TestVerifyTextSaysWhatRestoreChanges(t *testing.T) {
	vr := &backup.VerifyResult{Path: "/b/a.tar.gz", Entries: 2, Files: 1}
	for _, tc := range []struct {
		name string
		plan *backup.RestorePlan
		want []string
	}{
		{"refused", &backup.RestorePlan{Refused: "archive refused: the archive names runtime evil"},
			[]string{"NOT authenticated", "hbx restore would refuse it: archive refused: the archive names runtime evil"}},
		{"changes the runtime", &backup.RestorePlan{Authenticated: true, Image: "r:v2@sha256:2", Configured: "r:v1@sha256:1", ChangesRuntime: true, Paths: []string{"/data"}, Owners: "uid 0"},
			[]string{"\n  authenticated: encrypted with the box's passphrase\n", "would change the runtime: install and pin r:v2@sha256:2 (configured: r:v1@sha256:1)", "would replace: /data", "owners: uid 0"}},
		{"keeps the runtime", &backup.RestorePlan{Image: "r:v1@sha256:1", Paths: []string{"/data"}},
			[]string{"NOT authenticated", "keeps the runtime: the archive names the configured release"}},
	} {
		text := VerifyText(vr, tc.plan)
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: verify says %q, want %q", tc.name, text, w)
			}
		}
		if tc.plan.Authenticated == strings.Contains(text, "NOT authenticated") || strings.Count(text, "authenticated") != 1 {
			t.Errorf("%s: verify says %q; want it to say once whether the archive is authenticated (%v)", tc.name, text, tc.plan.Authenticated)
		}
	}
}
