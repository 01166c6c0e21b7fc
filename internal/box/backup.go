package box

// `hbx backup`, `hbx restore`, `hbx backup list` and `hbx backup verify`
// composed from the configuration (package backup, the supervisor's
// services, the data lock, the installer and the config file), and their
// results as text and JSON.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/pinfile"
	"github.com/hermesbox/hbx/internal/units"
)

// BackupRequest is what `hbx backup` asks of Box.Backup.
type BackupRequest struct {
	NoEncrypt bool            // write a plaintext archive
	Progress  backup.Progress // nil: none
}

// BackupOutcome is what Box.Backup made.
type BackupOutcome struct {
	*backup.Result
	// Supervised says whether a supervisor ran (and its programs were
	// stopped and started again).
	Supervised bool
}

// Backup makes one archive of b's data as `hbx backup` does: the
// passphrase (confirmed on a terminal) unless r.NoEncrypt, the data held
// (the running supervisor's hold, else the data lock as "hbx backup"),
// then backup.Create. Errors start with "backup: "; the outcome is not
// nil when Create returned a result, also with an error (its Skipped
// entries are worth a warning).
func (b Box) Backup(ctx context.Context, r BackupRequest) (*BackupOutcome, error) {
	opts := backupOptions(b.Config)
	opts.Encrypt, opts.HbxVersion, opts.Logger = !r.NoEncrypt, buildinfo.Version, b.Log
	opts.Runtime, opts.Config = installRuntime{cfg: b.Config, log: b.Log}, pinfile.File{Path: b.ConfigPath, Config: b.Config}
	if !r.NoEncrypt {
		p, err := b.passphrase(true)()
		if err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
		opts.Passphrase = p
	}
	svc, release, err := b.holdData(ctx, "hbx backup")
	defer release()
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if svc != nil {
		opts.Services = svc
	}
	if r.Progress != nil {
		opts.Progress = r.Progress
	}
	res, err := backup.Create(ctx, opts)
	var out *BackupOutcome
	if res != nil {
		out = &BackupOutcome{Result: res, Supervised: svc != nil}
	}
	if err != nil {
		return out, fmt.Errorf("backup: %w", err)
	}
	return out, nil
}

// WriteJSON writes o as hbx backup --json's result line.
func (o *BackupOutcome) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(struct {
		Event string `json:"event"`
		*backup.Result
		DurationMS int64 `json:"duration_ms"`
	}{"result", o.Result, o.Duration.Milliseconds()})
}

// Text is what a backup made and did, as hbx backup prints it.
func (o *BackupOutcome) Text() string {
	res := o.Result
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n  %s, %s (%s of data), %s, verified", res.Path, units.Bytes(res.Size), count(res.Files, "file", "files"), units.Bytes(res.Bytes), res.Duration.Round(time.Millisecond))
	if !res.Encrypted {
		b.WriteString(", NOT encrypted")
	}
	b.WriteString("\n")
	if !o.Supervised {
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

// RestoreRequest is what `hbx restore` asks of Box.Restore.
type RestoreRequest struct {
	Archive  string
	DataOnly bool // leave the archive's extra paths untouched
	// WithoutRuntime restores the data with the programs left stopped
	// when the archive's runtime cannot be fetched while another release
	// is active (backup.RestoreOptions.WithoutRuntime).
	WithoutRuntime bool
	// AcceptImage lets an archive that is not authenticated change the
	// runtime to exactly this image (backup.RestoreOptions.AcceptImage).
	AcceptImage string
	// Command is the command line to repeat in hints
	// (backup.RestoreOptions.Command); "" is hbx restore ARCHIVE.
	Command  string
	Progress backup.Progress // nil: none
}

// RestoreOutcome is what Box.Restore did.
type RestoreOutcome struct {
	*backup.RestoreResult
	Archive    string // the archive restored
	ConfigPath string // the config file a pin was written to
}

// Restore replaces b's data with r.Archive's as `hbx restore` does: the
// owner (executor.user), the data held (the running supervisor's hold,
// else the data lock as "hbx restore"), then backup.Restore with the
// installer and b's config file. The errors of the hold start with
// "restore: ", those of the restore with "restore ARCHIVE: ".
func (b Box) Restore(ctx context.Context, r RestoreRequest) (*RestoreOutcome, error) {
	if err := EnsureExecutorUser(ctx, b.Config, b.Log); err != nil {
		return nil, err
	}
	owner, err := b.Owner(b.Config.Executor.User)
	if err != nil {
		return nil, err
	}
	opts := restoreOptions(b.Config, r.Archive)
	opts.Passphrase, opts.DataOnly, opts.Owner, opts.Logger = b.passphrase(false), r.DataOnly, owner, b.Log
	opts.WithoutRuntime, opts.AcceptImage, opts.Command = r.WithoutRuntime, r.AcceptImage, r.Command
	b.restoreRelease(&opts)
	svc, release, err := b.holdData(ctx, "hbx restore")
	defer release()
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if svc != nil {
		opts.Services = svc
	}
	if r.Progress != nil {
		opts.Progress = r.Progress
	}
	res, err := backup.Restore(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", r.Archive, err)
	}
	return &RestoreOutcome{RestoreResult: res, Archive: r.Archive, ConfigPath: b.ConfigPath}, nil
}

// WriteJSON writes o as hbx restore --json's result line.
func (o *RestoreOutcome) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(struct {
		Event string `json:"event"`
		*backup.RestoreResult
		DurationMS int64 `json:"duration_ms"`
	}{"result", o.RestoreResult, o.Duration.Milliseconds()})
}

// Text is what a restore did, as hbx restore prints it.
func (o *RestoreOutcome) Text() string {
	res := o.RestoreResult
	var b strings.Builder
	fmt.Fprintf(&b, "restored %s: %s (%s) in %s\n", o.Archive, count(res.Files, "file", "files"), units.Bytes(res.Bytes), res.Duration.Round(time.Millisecond))
	for _, t := range slices.Sorted(maps.Keys(res.Restored)) {
		if old := res.Restored[t]; old != "" {
			fmt.Fprintf(&b, "  %s replaced; the previous content is in %s\n", t, old)
		} else {
			fmt.Fprintf(&b, "  %s restored\n", t)
		}
	}
	if res.RuntimeChanged {
		b.WriteString("  installed the runtime the archive was written by\n")
	}
	if res.Pinned != "" {
		fmt.Fprintf(&b, "  pinned %s in %s (it named %s)\n", res.Pinned, o.ConfigPath, res.PinnedOver)
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

// BackupListing is what `hbx backup list` shows: the archives of
// backup.dir (backup.name's and pre-upgrade ones) and the kept copies of
// replaced data beside executor.data_dir, each newest first.
type BackupListing struct {
	Archives []backup.Listed
	Kept     []backup.Kept
}

// BackupList lists b's archives and kept copies; errors start with
// "backup list: ".
func (b Box) BackupList() (*BackupListing, error) {
	list, err := backup.ListKinds(b.Config.Backup.Dir, b.Config.Backup.Name, PreUpgradeName)
	if err != nil {
		return nil, fmt.Errorf("backup list: %w", err)
	}
	kept, err := backup.ListKept(b.Config.Executor.DataDir)
	if err != nil {
		return nil, fmt.Errorf("backup list: %w", err)
	}
	return &BackupListing{Archives: list, Kept: kept}, nil
}

// WriteJSON writes l as one indented JSON array, the archives then the
// kept copies, each with its "kind".
func (l *BackupListing) WriteJSON(w io.Writer) error {
	all := []any{}
	for _, in := range l.Archives {
		all = append(all, in)
	}
	for _, k := range l.Kept {
		all = append(all, k)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(all)
}

// WriteText writes l as a table, one line per archive or kept copy.
func (l *BackupListing) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CREATED (UTC)\tKIND\tSIZE\tFILES\tIMAGE DIGEST\tPATH")
	for _, in := range l.Archives {
		files := "-" // no .json beside the archive
		if in.SHA256 != "" {
			files = fmt.Sprint(in.Files)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.Created.Format("2006-01-02 15:04:05"), in.Kind, units.Bytes(in.Size), files, orDash(string(in.ImageDigest())), in.Path)
	}
	for _, k := range l.Kept {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t-\t%s\n", k.Created.Format("2006-01-02 15:04:05"), k.Kind, units.Bytes(k.Bytes), k.Files, k.Path)
	}
	return tw.Flush()
}

// restoreRelease sets what decides a restore's release in opts: the
// installer, the config file's pin, the box's repositories.
func (b Box) restoreRelease(opts *backup.RestoreOptions) {
	opts.Runtime = installRuntime{cfg: b.Config, log: b.Log, from: b.From}
	opts.Config = pinfile.File{Path: b.ConfigPath, Config: b.Config, Sources: b.Sources}
	opts.AllowedRepository = b.Config.RepositoryAllowed
}

// Verified is what `hbx backup verify` found in an archive, and what
// `hbx restore` of it would change (backup.PlanRestore).
type Verified struct {
	*backup.VerifyResult
	Restore *backup.RestorePlan
}

// Verify checks archive against its manifest (backup.Verify) with b's
// passphrase source, and says what restoring it would change; errors
// start with "backup verify: ARCHIVE: ".
func (b Box) Verify(ctx context.Context, archive string) (*Verified, error) {
	res, err := backup.Verify(ctx, archive, b.passphrase(false))
	if err != nil {
		return nil, fmt.Errorf("backup verify: %s: %w", archive, err)
	}
	opts := restoreOptions(b.Config, archive)
	b.restoreRelease(&opts)
	if b.Owner != nil {
		if owner, err := b.Owner(b.Config.Executor.User); err == nil {
			opts.Owner = owner
		}
	}
	return &Verified{VerifyResult: res, Restore: backup.PlanVerified(opts, res)}, nil
}

// WriteJSON writes v as one JSON object.
func (v *Verified) WriteJSON(w io.Writer) error {
	res := v.VerifyResult
	return json.NewEncoder(w).Encode(map[string]any{
		"path": res.Path, "size": res.Size, "sha256": res.SHA256, "encrypted": res.Encrypted, "compression": res.Compression,
		"manifest": res.Manifest != nil, "entries": res.Entries, "files": res.Files, "bytes": res.Bytes, "unchecked": res.Unchecked,
		"notes": res.Notes, "restore": v.Restore,
	})
}

// Text is what verify found, as hbx backup verify prints it.
func (v *Verified) Text() string {
	res := v.VerifyResult
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
	v.restoreText(&b)
	return b.String()
}

// restoreText writes what hbx restore of the archive would change.
func (v *Verified) restoreText(b *strings.Builder) {
	p := v.Restore
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

func joinOr(s []string, empty string) string {
	if len(s) == 0 {
		return empty
	}
	return strings.Join(s, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
