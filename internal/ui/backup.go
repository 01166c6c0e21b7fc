package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/units"
)

// BackupJSON writes res as hbx backup --json's result line.
func BackupJSON(w io.Writer, res *backup.Result) error {
	return json.NewEncoder(w).Encode(struct {
		Event string `json:"event"`
		*backup.Result
		DurationMS int64 `json:"duration_ms"`
	}{"result", res, res.Duration.Milliseconds()})
}

// BackupText is what a backup made and did (res; supervised: a
// supervisor ran, and its programs were stopped and started again), as hbx
// backup prints it.
func BackupText(res *backup.Result, supervised bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n  %s, %s (%s of data), %s, verified", res.Path, units.Bytes(res.Size), count(res.Files, "file", "files"), units.Bytes(res.Bytes), res.Duration.Round(time.Millisecond))
	if !res.Encrypted {
		b.WriteString(", NOT encrypted")
	}
	b.WriteString("\n")
	if !supervised {
		b.WriteString("  no supervisor runs: nothing was stopped\n")
	} else {
		fmt.Fprintf(&b, "  programs stopped and running again: %s\n", joinOr(res.Restarted, "none were running"))
	}
	if res.Recovered != "" {
		fmt.Fprintf(&b, "  first %s\n", res.Recovered)
	}
	for _, p := range res.Pruned {
		fmt.Fprintf(&b, "  removed old archive %s\n", p)
	}
	return b.String()
}

// RestoreJSON writes res as hbx restore --json's result line.
func RestoreJSON(w io.Writer, res *backup.RestoreResult) error {
	return json.NewEncoder(w).Encode(struct {
		Event string `json:"event"`
		*backup.RestoreResult
		DurationMS int64 `json:"duration_ms"`
	}{"result", res, res.Duration.Milliseconds()})
}

// RestoreText is what a restore of archive did (res), a pin written to
// the config file at configPath, as hbx restore prints it.
func RestoreText(res *backup.RestoreResult, archive, configPath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "restored %s: %s (%s) in %s\n", archive, count(res.Files, "file", "files"), units.Bytes(res.Bytes), res.Duration.Round(time.Millisecond))
	for _, t := range slices.Sorted(maps.Keys(res.Restored)) {
		if old := res.Restored[t]; old != "" {
			fmt.Fprintf(&b, "  %s replaced; the previous content is in %s\n", t, old)
		} else {
			fmt.Fprintf(&b, "  %s restored\n", t)
		}
	}
	if res.RuntimeChanged {
		b.WriteString("  activated the runtime the archive was written by (installed, or the previous release reused)\n")
	}
	if res.Pinned != "" {
		fmt.Fprintf(&b, "  pinned %s in %s (it named %s)\n", res.Pinned, configPath, res.PinnedOver)
	}
	if res.Healthy {
		b.WriteString("  services running and healthy\n")
	}
	if res.WithoutRuntime != "" {
		fmt.Fprintf(&b, "  NOT started: the data is back, but its runtime %s could not be installed (%s): %s\n", res.WithoutRuntime, res.NotStartedBecause, res.NextSteps)
	}
	if res.Recovered != "" {
		fmt.Fprintf(&b, "  first %s\n", res.Recovered)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}

// ListJSON writes hbx backup list --json: one indented JSON array, the
// archives then the kept copies, each with its "kind".
func ListJSON(w io.Writer, archives []backup.Listed, kept []backup.Kept) error {
	all := []any{}
	for _, in := range archives {
		all = append(all, in)
	}
	for _, k := range kept {
		all = append(all, k)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(all)
}

// ListText writes hbx backup list: a table, one line per archive or kept
// copy.
func ListText(w io.Writer, archives []backup.Listed, kept []backup.Kept) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CREATED (UTC)\tKIND\tSIZE\tFILES\tIMAGE DIGEST\tPATH")
	for _, in := range archives {
		files := "-" // no .json beside the archive
		if in.SHA256 != "" {
			files = fmt.Sprint(in.Files)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.Created.Format("2006-01-02 15:04:05"), in.Kind, units.Bytes(in.Size), files, orDash(string(in.ImageDigest())), in.Path)
	}
	for _, k := range kept {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t-\t%s\n", k.Created.Format("2006-01-02 15:04:05"), k.Kind, units.Bytes(k.Bytes), k.Files, k.Path)
	}
	return tw.Flush()
}

// VerifyJSON writes hbx backup verify --json: what verify found (res) and
// what hbx restore of the archive would change (plan), one JSON object.
func VerifyJSON(w io.Writer, res *backup.VerifyResult, plan *backup.RestorePlan) error {
	return json.NewEncoder(w).Encode(map[string]any{
		"path": res.Path, "size": res.Size, "sha256": res.SHA256, "encrypted": res.Encrypted, "compression": res.Compression,
		"manifest": res.Manifest != nil, "entries": res.Entries, "files": res.Files, "bytes": res.Bytes, "unchecked": res.Unchecked,
		"notes": res.Notes, "restore": plan,
	})
}

// VerifyText is what verify found (res) and what hbx restore of the
// archive would change (plan, nil: not known), as hbx backup verify
// prints it.
func VerifyText(res *backup.VerifyResult, plan *backup.RestorePlan) string {
	var b strings.Builder
	what := "every entry matches the manifest"
	if res.Manifest == nil {
		what = "no manifest"
	}
	fmt.Fprintf(&b, "ok: %s: %s, %s (%s), %s\n", res.Path, count(res.Entries, "entry", "entries"), count(res.Files, "file", "files"), units.Bytes(res.Bytes), what)
	for _, u := range res.Unchecked {
		fmt.Fprintf(&b, "  not checked: %s\n", u)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	if res.Manifest != nil {
		for _, f := range res.Manifest.Skipped {
			fmt.Fprintf(&b, "  not in the archive: %q (%s)\n", f.Path, f.Type)
		}
	}
	restorePlanText(&b, plan)
	return b.String()
}

// restorePlanText writes what hbx restore of the archive would change.
func restorePlanText(b *strings.Builder, p *backup.RestorePlan) {
	if p == nil {
		return
	}
	if p.Authenticated {
		b.WriteString("  authenticated: encrypted with the box's passphrase\n")
	} else {
		b.WriteString("  NOT authenticated: not encrypted with the box's passphrase; anyone could have written it\n")
	}
	if p.Refused != "" {
		fmt.Fprintf(b, "  hbx restore would refuse it: %s\n", p.Refused)
		return
	}
	switch {
	case p.ChangesRuntime:
		fmt.Fprintf(b, "  hbx restore would change the runtime: install and pin %s (configured: %s)\n", p.Image, p.Configured)
	case p.Image != "":
		fmt.Fprintf(b, "  hbx restore keeps the runtime: the archive names the configured release\n")
	default:
		fmt.Fprintf(b, "  hbx restore keeps the runtime: the archive names no release (the configured one is used)\n")
	}
	fmt.Fprintf(b, "  hbx restore would replace: %s\n", strings.Join(p.Paths, ", "))
	fmt.Fprintf(b, "  owners: %s\n", p.Owners)
}

// JSONProgress writes backup and restore events as JSON lines, each with
// its UTC time.
type JSONProgress struct{ enc *json.Encoder }

// NewJSONProgress writes events to w.
func NewJSONProgress(w io.Writer) *JSONProgress {
	return &JSONProgress{enc: json.NewEncoder(w)}
}

// Event writes e (backup.Progress).
func (p *JSONProgress) Event(e backup.Event) {
	_ = p.enc.Encode(struct {
		Time time.Time `json:"time"`
		backup.Event
	}{time.Now().UTC(), e})
}

// count is n and the noun for n: one when n is 1, many otherwise ("1
// file", "2 files").
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// joinOr is s joined with ", ", or empty when s is empty.
func joinOr(s []string, empty string) string {
	if len(s) == 0 {
		return empty
	}
	return strings.Join(s, ", ")
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
