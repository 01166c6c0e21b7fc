package box

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
		made := (&BackupOutcome{Result: &backup.Result{Path: "/b/a.tar.gz.gpg", Files: tc.n, Encrypted: true, Duration: time.Second}}).Text()
		restored := (&RestoreOutcome{RestoreResult: &backup.RestoreResult{Files: tc.n}, Archive: "/b/a.tar.gz.gpg"}).Text()
		verified := (&Verified{VerifyResult: &backup.VerifyResult{Path: "/b/a.tar.gz.gpg", Entries: tc.n, Files: tc.n}}).Text()
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
