package ui

import (
	"fmt"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/upgrade"
)

// ChangeText renders r as hbx upgrade (verb "upgraded") and hbx rollback
// ("rolled back") print it: old → new with the duration, the manifests,
// what staging fetched and reused (when it moved any layer), the backup
// (a rollback's: the one its data was restored from), where replaced data
// is kept and a recovery done first, then
// one line per note; for an interrupted change whose recovery was the
// whole rollback, the recovery and what is active instead. Each line ends
// in "\n".
func ChangeText(r *upgrade.Result, verb string) string {
	var b strings.Builder
	if r.Interrupted {
		// The recovery of an interrupted change was the whole rollback.
		fmt.Fprintf(&b, "%s\n", r.Recovered)
		fmt.Fprintf(&b, "  %s is active; nothing more to roll back\n", r.New.Image)
	} else {
		fmt.Fprintf(&b, "%s %s → %s in %s\n", verb, r.Old.Image, r.New.Image, r.Duration.Round(time.Millisecond))
		fmt.Fprintf(&b, "  manifest %s → %s\n", r.Old.ManifestDigest, r.New.ManifestDigest)
		if t := r.Transfer; t.Fetched+t.Reused > 0 {
			fmt.Fprintf(&b, "  %s\n", TransferText(t))
		}
		backup := "  pre-upgrade backup: "
		if verb == "rolled back" {
			backup = "  data restored from the pre-upgrade backup "
		}
		for _, l := range [][2]string{{backup, r.Backup}, {"  the replaced data is kept in ", r.KeptAside}, {"  first ", r.Recovered}} {
			if l[1] != "" {
				fmt.Fprintf(&b, "%s%s\n", l[0], l[1])
			}
		}
	}
	writeNotes(&b, r.Notes)
	return b.String()
}

// ChangeFields is r as the JSON result line of hbx upgrade and rollback:
// "event": "result", old, new, backup, kept_aside, notes, recovered,
// interrupted, duration_ms, and Transfer's counts as fetched, reused,
// fetched_bytes and reused_bytes (0 for a rollback).
func ChangeFields(r *upgrade.Result) map[string]any {
	t := r.Transfer
	return map[string]any{
		"event": "result", "old": r.Old, "new": r.New, "backup": r.Backup, "kept_aside": r.KeptAside,
		"notes": r.Notes, "recovered": r.Recovered, "interrupted": r.Interrupted, "duration_ms": r.Duration.Milliseconds(),
		"fetched": t.Fetched, "reused": t.Reused, "fetched_bytes": t.FetchedBytes, "reused_bytes": t.ReusedBytes,
		"location": t.Location,
	}
}

// TransferText is t as hbx upgrade prints it: "fetched 352 B of 42.5 MiB (1
// layer) from ghcr.io/o/executor-selfhost; reused 3 layers, 42.5 MiB"
// (the location when one answered).
func TransferText(t upgrade.Transfer) string {
	from := ""
	if t.Location != "" {
		from = " from " + t.Location
	}
	return fmt.Sprintf("fetched %s of %s (%s)%s; reused %s, %s", units.Bytes(t.FetchedBytes), units.Bytes(t.FetchedBytes+t.ReusedBytes),
		layers(t.Fetched), from, layers(t.Reused), units.Bytes(t.ReusedBytes))
}

// layers is "1 layer" or "n layers".
func layers(n int) string {
	if n == 1 {
		return "1 layer"
	}
	return fmt.Sprintf("%d layers", n)
}

// InstallChangeText renders r, a release change hbx install made over existing
// data (with a pre-change backup), as hbx install prints it.
func InstallChangeText(r *upgrade.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "installed %s (%s, manifest %s) in %s, replacing %s over existing data\n", r.New.Image, r.New.Platform, r.New.ManifestDigest, r.Duration.Round(time.Millisecond), r.Old.Image)
	if t := r.Transfer; t.Fetched+t.Reused > 0 {
		fmt.Fprintf(&b, "  %s\n", TransferText(t))
	}
	fmt.Fprintf(&b, "  pre-change backup: %s (hbx rollback undoes this change)\n", r.Backup)
	if r.Recovered != "" {
		fmt.Fprintf(&b, "  first %s\n", r.Recovered)
	}
	writeNotes(&b, r.Notes)
	return b.String()
}

// InstallChangeFields is r as the fields of hbx install's JSON result line
// (image: the configured executor.image), for a release change over
// existing data.
func InstallChangeFields(r *upgrade.Result, image string) map[string]any {
	return map[string]any{
		"changed": true, "reason": "release change over existing data, with a pre-change backup", "image": image,
		"platform": r.New.Platform, "index_digest": r.New.IndexDigest, "manifest_digest": r.New.ManifestDigest,
		"old": r.Old, "new": r.New, "backup": r.Backup, "notes": r.Notes, "recovered": r.Recovered,
		"duration_ms": r.Duration.Milliseconds(), "fetched": r.Transfer.Fetched, "reused": r.Transfer.Reused,
		"fetched_bytes": r.Transfer.FetchedBytes, "reused_bytes": r.Transfer.ReusedBytes,
	}
}

// writeNotes writes "  note: n" for each note.
func writeNotes(b *strings.Builder, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(b, "  note: %s\n", n)
	}
}
