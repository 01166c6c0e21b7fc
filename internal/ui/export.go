package ui

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/hermesbox/hbx/internal/export"
	"github.com/hermesbox/hbx/internal/units"
)

// ExportJSON writes hbx export --json's result: one JSON object.
func ExportJSON(w io.Writer, res *export.Result) error {
	return json.NewEncoder(w).Encode(map[string]any{
		"file": res.Path, "image": res.Image, "tag": res.Tag, "platform": res.Platform,
		"index_digest": res.Index, "manifest_digest": res.Manifest,
		"blobs": res.Blobs, "blob_bytes": res.BlobBytes, "bytes": res.Bytes,
	})
}

// ExportText is hbx export's result line.
func ExportText(res *export.Result) string {
	return fmt.Sprintf("exported %s (%s, manifest %s) to %s: %s, %s (%d bytes)\n",
		res.Image, res.Platform, res.Manifest, res.Path, units.Count(res.Blobs, "blob", "blobs"), units.Bytes(res.Bytes), res.Bytes)
}
