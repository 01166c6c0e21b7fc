package ui

import (
	"testing"
	"time"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/release"
)

// TestInstallText: hbx install's result line, unchanged (with and without
// --verify, and with kept blobs fetched again) and installed.
func TestInstallText(t *testing.T) {
	rel := &release.Installed{Meta: release.Meta{Platform: "linux/arm64", ManifestDigest: "sha256:22", IndexDigest: "sha256:bb"}}
	res := &installer.Result{Release: rel, Reason: "no release active", Changed: true, Fetched: 3, Reused: 1, FetchedBytes: 300, ReusedBytes: 100, Duration: 2500 * time.Microsecond}
	for _, tt := range []struct {
		changed, verified  bool
		fetched, refetched int
		from               string
		want               string
	}{
		{true, false, 3, 0, "", "installed img (linux/arm64, manifest sha256:22) in 3ms: 3 blobs fetched (300 bytes), 1 reused (100 bytes); reason: no release active\n"},
		{true, false, 1, 0, "", "installed img (linux/arm64, manifest sha256:22) in 3ms: 1 blob fetched (300 bytes), 1 reused (100 bytes); reason: no release active\n"},
		{true, false, 3, 0, "/x/image.tar", "installed img (linux/arm64, manifest sha256:22) in 3ms: 3 blobs read from the local image (300 bytes), 1 reused (100 bytes); reason: no release active\n"},
		{false, false, 0, 0, "", "up to date: img (linux/arm64, manifest sha256:22)\n"},
		{false, true, 0, 0, "", "up to date, every file verified against files.json: img (linux/arm64, manifest sha256:22)\n"},
		{false, true, 3, 6, "", "up to date, every file verified against files.json, 6 kept blobs fetched again: 3 layers (300 bytes) and 3 documents (index/manifest/config): img (linux/arm64, manifest sha256:22)\n"},
		{false, true, 1, 1, "/x/image.tar", "up to date, every file verified against files.json, 1 kept blob read from the local image again: 1 layer (300 bytes): img (linux/arm64, manifest sha256:22)\n"},
		{false, true, 0, 1, "", "up to date, every file verified against files.json, 1 kept blob fetched again: 1 document (index/manifest/config): img (linux/arm64, manifest sha256:22)\n"},
	} {
		res.Changed, res.Fetched, res.Refetched, res.From = tt.changed, tt.fetched, tt.refetched, tt.from
		if got := InstallText("img", res, tt.verified); got != tt.want {
			t.Errorf("InstallText(changed %v, verified %v, fetched %d, refetched %d, from %q) =\n%q, want\n%q", tt.changed, tt.verified, tt.fetched, tt.refetched, tt.from, got, tt.want)
		}
	}
	// The registry location that answered (registry.mirrors) is named.
	res.Location = "ghcr.io/usefulsoftwareco/executor-selfhost"
	for _, tt := range []struct {
		changed   bool
		refetched int
		want      string
	}{
		{true, 0, "installed img (linux/arm64, manifest sha256:22) in 3ms: 3 blobs fetched from ghcr.io/usefulsoftwareco/executor-selfhost (300 bytes), 1 reused (100 bytes); reason: no release active\n"},
		{false, 4, "up to date, every file verified against files.json, 4 kept blobs fetched again: 3 layers (300 bytes) and 1 document (index/manifest/config), from ghcr.io/usefulsoftwareco/executor-selfhost: img (linux/arm64, manifest sha256:22)\n"},
	} {
		res.Changed, res.Fetched, res.Refetched, res.From = tt.changed, 3, tt.refetched, ""
		if got := InstallText("img", res, true); got != tt.want {
			t.Errorf("InstallText(location, changed %v) =\n%q, want\n%q", tt.changed, got, tt.want)
		}
	}
	if f := InstallFields("img", res); f["location"] != res.Location {
		t.Errorf("InstallFields()[location] = %v, want %s", f["location"], res.Location)
	}
	res.Fetched, res.From, res.Location = 3, "", ""
	if f := InstallFields("img", res); f["index_digest"] != rel.Meta.IndexDigest || f["fetched"] != 3 || f["fetched_bytes"] != int64(300) || f["reused_bytes"] != int64(100) || f["duration_ms"] != int64(2) {
		t.Errorf("InstallFields() = %v", f)
	}
}
