package ui

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
)

// TestChangeText: what hbx upgrade, rollback and install print for a
// release change, line by line.
func TestChangeText(t *testing.T) {
	r := &upgrade.Result{
		Old:    upgrade.Release{Target: release.Target{Image: "r/x:v1@sha256:aa", Platform: "linux/amd64", ManifestDigest: "sha256:11"}},
		New:    upgrade.Release{Target: release.Target{Image: "r/x:v2@sha256:bb", Platform: "linux/amd64", IndexDigest: "sha256:bb", ManifestDigest: "sha256:22"}},
		Backup: "/b/pre-upgrade-1.tar.zst.age", Recovered: "recovered an interrupted upgrade", Notes: []string{"n1"},
		Duration: 1234567 * time.Microsecond,
		Transfer: upgrade.Transfer{Fetched: 1, Reused: 3, FetchedBytes: 352, ReusedBytes: 85 << 19},
	}
	want := "upgraded r/x:v1@sha256:aa → r/x:v2@sha256:bb in 1.235s\n" +
		"  manifest sha256:11 → sha256:22\n" +
		"  fetched 352 B of 42.5 MiB (1 layer); reused 3 layers, 42.5 MiB\n" +
		"  pre-upgrade backup: /b/pre-upgrade-1.tar.zst.age\n" +
		"  first recovered an interrupted upgrade\n" +
		"  note: n1\n"
	if got := ChangeText(r, "upgraded"); got != want {
		t.Errorf("Text(upgraded) =\n%s, want\n%s", got, want)
	}
	want = "installed r/x:v2@sha256:bb (linux/amd64, manifest sha256:22) in 1.235s, replacing r/x:v1@sha256:aa over existing data\n" +
		"  fetched 352 B of 42.5 MiB (1 layer); reused 3 layers, 42.5 MiB\n" +
		"  pre-change backup: /b/pre-upgrade-1.tar.zst.age (hbx rollback undoes this change)\n" +
		"  first recovered an interrupted upgrade\n" +
		"  note: n1\n"
	if got := InstallChangeText(r); got != want {
		t.Errorf("InstallText() =\n%s, want\n%s", got, want)
	}
	// A rollback names the backup its data came from.
	back := &upgrade.Result{Old: r.New, New: r.Old, Backup: r.Backup, KeptAside: "/d.rolled-back", Duration: time.Second}
	want = "rolled back r/x:v2@sha256:bb → r/x:v1@sha256:aa in 1s\n" +
		"  manifest sha256:22 → sha256:11\n" +
		"  data restored from the pre-upgrade backup /b/pre-upgrade-1.tar.zst.age\n" +
		"  the replaced data is kept in /d.rolled-back\n"
	if got := ChangeText(back, "rolled back"); got != want {
		t.Errorf("Text(rolled back) =\n%s, want\n%s", got, want)
	}
	in := &upgrade.Result{New: r.New, Recovered: "rolled the interrupted upgrade back", Interrupted: true, KeptAside: "/d.rolled-back"}
	want = "rolled the interrupted upgrade back\n  r/x:v2@sha256:bb is active; nothing more to roll back\n"
	if got := ChangeText(in, "rolled back"); got != want {
		t.Errorf("Text(interrupted) =\n%s, want\n%s", got, want)
	}
	b, err := json.Marshal(ChangeFields(r))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil || fields["event"] != "result" || fields["duration_ms"] != 1234.0 || fields["kept_aside"] != "" ||
		fields["fetched_bytes"] != 352.0 || fields["reused_bytes"] != float64(85<<19) || fields["fetched"] != 1.0 || fields["reused"] != 3.0 {
		t.Errorf("Fields() = %s (%v), want event result, duration_ms 1234, kept_aside, fetched 1 (352 bytes), reused 3 (%d bytes)", b, err, 85<<19)
	}
	// The registry location that answered (registry.mirrors) is named.
	r.Transfer.Location = "ghcr.io/usefulsoftwareco/executor-selfhost"
	if got, want := TransferText(r.Transfer), "fetched 352 B of 42.5 MiB (1 layer) from ghcr.io/usefulsoftwareco/executor-selfhost; reused 3 layers, 42.5 MiB"; got != want {
		t.Errorf("Transfer.String() with a location = %q, want %q", got, want)
	}
	if got := ChangeFields(r)["location"]; got != r.Transfer.Location {
		t.Errorf("Fields()[location] = %v, want %s", got, r.Transfer.Location)
	}
	if f := InstallChangeFields(r, "img"); f["image"] != "img" || f["manifest_digest"] != r.New.ManifestDigest || f["changed"] != true || f["fetched_bytes"] != int64(352) {
		t.Errorf("InstallFields(img) = %v", f)
	}
}
