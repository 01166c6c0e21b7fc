package progress

import (
	"fmt"

	"github.com/hermesbox/hbx/installer"
)

// ResultText is the line hbx install prints for res, an install of image:
// "up to date: ..." when nothing changed (verified: --verify re-hashed
// every file), else "installed ..." with the duration, blobs fetched and
// reused, and the reason. It ends in "\n".
func ResultText(image string, res *installer.Result, verified bool) string {
	m := res.Release.Meta
	if !res.Changed {
		state := "up to date"
		if verified {
			state = "up to date, every file verified against files.json"
		}
		if res.Fetched > 0 {
			state += fmt.Sprintf(", %d kept layer blobs fetched again (%d bytes)", res.Fetched, res.FetchedBytes)
		}
		return fmt.Sprintf("%s: %s (%s, manifest %s)\n", state, image, m.Platform, m.ManifestDigest)
	}
	return fmt.Sprintf("installed %s (%s, manifest %s) in %s: %d blobs fetched (%d bytes), %d reused (%d bytes); reason: %s\n",
		image, m.Platform, m.ManifestDigest, res.Duration.Round(1e6), res.Fetched, res.FetchedBytes, res.Reused, res.ReusedBytes, res.Reason)
}

// ResultFields is res, an install of image, as the fields of hbx
// install's JSON result line (JSON.Result).
func ResultFields(image string, res *installer.Result) map[string]any {
	m := res.Release.Meta
	return map[string]any{
		"changed": res.Changed, "reason": res.Reason, "image": image,
		"platform": m.Platform, "index_digest": m.IndexDigest, "manifest_digest": m.ManifestDigest,
		"fetched": res.Fetched, "reused": res.Reused, "fetched_bytes": res.FetchedBytes, "reused_bytes": res.ReusedBytes,
		"duration_ms": res.Duration.Milliseconds(),
	}
}
