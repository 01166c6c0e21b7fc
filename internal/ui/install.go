package ui

import (
	"fmt"
	"strings"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/units"
)

// InstallText is the line hbx install prints for res, an install of image:
// "up to date: ..." when nothing changed (verified: --verify re-hashed
// every file; with the kept blobs fetched again, layers and documents),
// else "installed ..." with the duration, blobs fetched (from
// Result.Location, or read from the local image, Result.From) and reused,
// and the reason. It ends in "\n". The JSON fields carry "location".
func InstallText(image string, res *installer.Result, verified bool) string {
	m := res.Release.Meta
	if !res.Changed {
		state := "up to date"
		if verified {
			state = "up to date, every file verified against files.json"
		}
		if n := max(res.Refetched, res.Fetched); n > 0 {
			var what []string
			if res.Fetched > 0 {
				what = append(what, fmt.Sprintf("%s (%d bytes)", units.Count(res.Fetched, "layer", "layers"), res.FetchedBytes))
			}
			if docs := n - res.Fetched; docs > 0 {
				what = append(what, units.Count(docs, "document", "documents")+" (index/manifest/config)")
			}
			state += fmt.Sprintf(", %s %s again: %s%s", units.Count(n, "kept blob", "kept blobs"), installFetched(res), strings.Join(what, " and "), installLocation(res, ", from "))
		}
		return fmt.Sprintf("%s: %s (%s, manifest %s)\n", state, image, m.Platform, m.ManifestDigest)
	}
	return fmt.Sprintf("installed %s (%s, manifest %s) in %s: %s %s%s (%d bytes), %d reused (%d bytes); reason: %s\n",
		image, m.Platform, m.ManifestDigest, res.Duration.Round(1e6), units.Count(res.Fetched, "blob", "blobs"), installFetched(res), installLocation(res, " from "), res.FetchedBytes, res.Reused, res.ReusedBytes, res.Reason)
}

// installFetched is how res got its blobs: "fetched" from a registry, "read from
// the local image" with Options.From.
func installFetched(res *installer.Result) string {
	if res.From != "" {
		return "read from the local image"
	}
	return "fetched"
}

// installLocation is sep and the registry location res's image came from
// (Result.Location), "" when none.
func installLocation(res *installer.Result, sep string) string {
	if res.Location == "" || res.From != "" {
		return ""
	}
	return sep + res.Location
}

// InstallFields is res, an install of image, as the fields of hbx
// install's JSON result line (installer/progress's JSON.Result).
func InstallFields(image string, res *installer.Result) map[string]any {
	m := res.Release.Meta
	return map[string]any{
		"changed": res.Changed, "reason": res.Reason, "image": image,
		"platform": m.Platform, "index_digest": m.IndexDigest, "manifest_digest": m.ManifestDigest,
		"fetched": res.Fetched, "reused": res.Reused, "fetched_bytes": res.FetchedBytes, "reused_bytes": res.ReusedBytes,
		"refetched": res.Refetched, "duration_ms": res.Duration.Milliseconds(), "location": res.Location,
	}
}
