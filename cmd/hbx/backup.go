package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	digest "github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/supervisorwatch"
	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/supervisor"
)

// backupOptions are the flags of `hbx backup`.
type backupOptions struct {
	noEncrypt bool
	json      bool
}

// newBackupCommand builds `hbx backup` and its subcommands.
func newBackupCommand(g *globals) *cobra.Command {
	var o backupOptions
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Make a cold, encrypted, verified backup of Executor's data",
		Long: `Backup archives executor.data_dir (and backup.paths) while the supervised
programs are stopped, so the database and keys are never torn:

  1. take the lock install and restore take (runtime_dir/hbx.lock);
  2. check free space in backup.dir;
  3. ask the supervisor to stop every program (reverse priority order) and
     keep them stopped while this command's connection lives; without a
     supervisor, hold the data directory's lock (refusing beside "hbx run
     executor") and refuse if any process holds files in it;
  4. hash every file, then write a PAX tar whose first entry is a manifest
     (hbx-backup.json: hbx version, image and digests, every file's path,
     size and sha256), gzip-compressed (backup.compression: gzip or zstd),
     encrypted with OpenPGP (AES-256, the passphrase from
     backup.passphrase_file or asked on the terminal), to a temporary file
     in backup.dir, fsynced, renamed to <name>-<UTC time>.tar.gz.gpg, mode
     0600, with a .sha256 file beside it;
  5. start the programs again and wait (backup.health_wait) until those it
     stopped are RUNNING and Executor answers /api/health; the output
     names them; when they do not run again (the supervisor died, a program
     is FATAL), it says so and exits 1;
  6. read the archive back and check it against its manifest;
  7. remove archives beyond backup.keep.

Any failure after step 3 (no space, a file changing while archived, the
read-back check) prints one line, exits 1, removes the partial archive and
starts the programs again as in step 5, naming them. Sockets, fifos and
devices are not archived: each gets a warning line. The passphrase file is
read as gpg --passphrase-file reads it (the first line, nothing stripped,
a CRLF file's \r included).

"gpg --decrypt ARCHIVE | tar -xz" reads the archives. The runtime directory
and executor.state_dir are never archived. --no-encrypt writes a plaintext
.tar.gz (with a warning: the archive holds Executor's credentials).

--json prints one JSON line per step ({"event": "stopped"}, ...) and the
result ({"event": "result", "path": ..., "size": ..., "files": ...}).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runBackup(cmd.Context(), g, cfg, o)
		},
	}
	cmd.Flags().BoolVar(&o.noEncrypt, "no-encrypt", false, "write a plaintext .tar.gz (not recommended: it holds credentials)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print progress events and the result as JSON lines")
	cmd.AddCommand(newBackupListCommand(g), newBackupVerifyCommand(g))
	return cmd
}

// runBackup makes one archive and prints where it is.
func runBackup(ctx context.Context, g *globals, cfg *config.Config, o backupOptions) error {
	opts := backup.ConfiguredOptions(cfg)
	opts.Encrypt, opts.HbxVersion, opts.Logger = !o.noEncrypt, buildinfo.Version, g.log
	opts.Runtime, opts.Config = installRuntime{g: g, cfg: cfg}, restorePinner{g: g, cfg: cfg}
	if o.noEncrypt {
		fmt.Fprintln(g.stderr, "hbx: warning: --no-encrypt: the archive will hold Executor's database and encryption keys in plaintext")
	} else {
		p, err := passphrase(cfg, true)()
		if err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		opts.Passphrase = p
	}
	svc, release, err := holdData(ctx, g, cfg, "hbx backup")
	defer release()
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if svc != nil {
		opts.Services = svc
	}
	if o.json {
		opts.Progress = newBackupJSONProgress(g.stdout)
	}
	res, err := backup.Create(ctx, opts)
	if res != nil {
		for _, s := range res.Skipped {
			fmt.Fprintf(g.stderr, "hbx: warning: not archived: %s\n", s)
		}
	}
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if o.json {
		return json.NewEncoder(g.stdout).Encode(struct {
			Event string `json:"event"`
			*backup.Result
			DurationMS int64 `json:"duration_ms"`
		}{"result", res, res.Duration.Milliseconds()})
	}
	return printBackup(g.stdout, res, svc != nil)
}

// printBackup prints what a backup made and did; supervised says whether
// a supervisor ran.
func printBackup(w io.Writer, res *backup.Result, supervised bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n  %s, %d files (%s of data), %s, verified", res.Path, units.Bytes(res.Size), res.Files, units.Bytes(res.Bytes), res.Duration.Round(time.Millisecond))
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
	_, err := io.WriteString(w, b.String())
	return err
}

// holdData makes the data safe to read or replace for command: the
// running supervisor (its holds keep the programs stopped), else the data
// lock (lockDataUnsupervised). release closes the one or the other and is
// never nil.
func holdData(ctx context.Context, g *globals, cfg *config.Config, command string) (svc *supervisorServices, release func(), err error) {
	svc, err = dialServices(ctx, g, cfg)
	if err != nil {
		return nil, func() {}, err
	}
	unlock, err := lockDataUnsupervised(ctx, g, cfg, svc, command)
	if svc == nil {
		return nil, unlock, err
	}
	return svc, func() { svc.Close(); unlock() }, err
}

// newBackupListCommand builds `hbx backup list`.
func newBackupListCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the archives in backup.dir, newest first",
		Long: `List prints one line per archive of backup.dir named after backup.name
or pre-upgrade (hbx upgrade's), newest first: creation time (UTC), kind ("backup" or "pre-upgrade"), size, file count, the
image digest the data was written by (the child manifest digest, else the
index digest), and the path. Then one line per copy of replaced data kept
beside executor.data_dir, newest first: kind "pre-restore" (the data a
restore replaced) or "rolled-back" (the data a rollback replaced, written
by the release the upgrade moved to). backup.keep_pre_restore bounds each
kind (a rollback always keeps its newest copy). --json prints one JSON
array of both, each with its "kind".

A kept copy is a directory, not an archive: to bring one back, stop the
programs (hbx stop all), move executor.data_dir aside and the copy into
its place (mv), and start them (hbx start all). For a rolled-back copy,
first make the release that wrote it active and configured again
(hbx upgrade --image that release; upgrade.json in the runtime directory
names the last one as "new"), then swap.`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runBackupList(g.stdout, cfg, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// runBackupList prints the archives of backup.dir and the kept copies of
// replaced data, newest first.
func runBackupList(w io.Writer, cfg *config.Config, asJSON bool) error {
	list, err := backup.ListKinds(cfg.Backup.Dir, cfg.Backup.Name, preUpgradeName)
	if err != nil {
		return fmt.Errorf("backup list: %w", err)
	}
	kept, err := backup.ListKept(cfg.Executor.DataDir)
	if err != nil {
		return fmt.Errorf("backup list: %w", err)
	}
	if asJSON {
		all := []any{}
		for _, in := range list {
			all = append(all, in)
		}
		for _, k := range kept {
			all = append(all, k)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CREATED (UTC)\tKIND\tSIZE\tFILES\tIMAGE DIGEST\tPATH")
	for _, in := range list {
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

// newBackupVerifyCommand builds `hbx backup verify`.
func newBackupVerifyCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify ARCHIVE",
		Short: "Check an archive against its manifest without writing anything",
		Long: `Verify decrypts (asking for the passphrase as backup does), decompresses
and reads ARCHIVE to its end, and checks every entry against the manifest:
type, mode, size, link target and sha256; that every listed entry is
there and nothing else is; the OpenPGP integrity check, the compression's
checksum and the .sha256 file beside it. It writes nothing. Exit status 0
when everything matches, 1 naming the first bad entry otherwise. An
archive without a manifest (tar -czf ... | gpg --symmetric) is read to its
end and the output says what could not be checked.`,
		Args: wantArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runBackupVerify(cmd.Context(), g.stdout, cfg, args[0], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// runBackupVerify checks archive against its manifest and prints what it
// found.
func runBackupVerify(ctx context.Context, w io.Writer, cfg *config.Config, archive string, asJSON bool) error {
	res, err := backup.Verify(ctx, archive, passphrase(cfg, false))
	if err != nil {
		return fmt.Errorf("backup verify: %s: %w", archive, err)
	}
	if asJSON {
		return json.NewEncoder(w).Encode(map[string]any{
			"path": res.Path, "size": res.Size, "sha256": res.SHA256, "encrypted": res.Encrypted, "compression": res.Compression,
			"manifest": res.Manifest != nil, "entries": res.Entries, "files": res.Files, "bytes": res.Bytes, "unchecked": res.Unchecked,
			"notes": res.Notes,
		})
	}
	what := "every entry matches the manifest"
	if res.Manifest == nil {
		what = "no manifest"
	}
	fmt.Fprintf(w, "ok: %s: %d entries, %d files (%s), %s\n", res.Path, res.Entries, res.Files, units.Bytes(res.Bytes), what)
	for _, u := range res.Unchecked {
		fmt.Fprintf(w, "  not checked: %s\n", u)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if res.Manifest != nil {
		for _, f := range res.Manifest.Skipped {
			fmt.Fprintf(w, "  not in the archive: %q (%s)\n", f.Path, f.Type)
		}
	}
	return nil
}

// passphrase returns the archives' passphrase source
// (backup.PassphraseSource): backup.passphrase_file, else a prompt on the
// controlling terminal (twice with confirm).
func passphrase(cfg *config.Config, confirm bool) backup.PassphraseFunc {
	return backup.PassphraseSource(cfg.Backup.PassphraseFile, confirm, openTTY)
}

// tty is backup.Terminal on the controlling terminal.
type tty struct{ f *os.File }

func openTTY() (backup.Terminal, func(), error) {
	f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	return tty{f}, func() { f.Close() }, nil
}

func (t tty) Ask(prompt string) ([]byte, error) {
	fmt.Fprint(t.f, prompt)
	p, err := term.ReadPassword(int(t.f.Fd()))
	fmt.Fprintln(t.f)
	if err != nil {
		return nil, fmt.Errorf("read passphrase: %w", err)
	}
	return p, nil
}

// dialServices returns the supervisor as backup.Services, or nil when none
// runs.
func dialServices(ctx context.Context, g *globals, cfg *config.Config) (*supervisorServices, error) {
	c, err := supervisor.Dial(ctx, cfg.Supervisor.Socket)
	if errors.Is(err, supervisor.ErrNotRunning) {
		g.log.Info("no supervisor runs", "socket", cfg.Supervisor.Socket)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	auto := cfg.AutostartPrograms()
	sts, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	watched := ""
	if len(sts) > 0 {
		watched = sts[0].Name
	}
	sock := supervisorSocket{c: c, watch: watchSupervisor(c, watched)}
	s := &supervisorServices{probe: supervisor.ProbeFunc(readinessProbe(cfg))}
	s.Supervised = backup.NewSupervised(sock, s, auto, sock.watch)
	s.NotRunning = supervisor.ErrNotRunning
	return s, nil
}

// supervisorServices is backup.Services over the supervisor's control
// socket (backup.Supervised); probe is its readiness check.
type supervisorServices struct {
	*backup.Supervised
	probe supervisor.Probe
}

// Check runs the readiness probe (backup.Probe).
func (s *supervisorServices) Check(ctx context.Context) error { return s.probe.Check(ctx) }

// supervisorSocket is backup.Supervisor over a supervisor.Client.
type supervisorSocket struct {
	c     *supervisor.Client
	watch *supervisorwatch.Watch
}

func (s supervisorSocket) Status(ctx context.Context) ([]backup.ProgramState, error) {
	sts, err := s.c.Status(ctx)
	out := make([]backup.ProgramState, len(sts))
	for i, st := range sts {
		out[i] = backup.ProgramState{Name: st.Name, State: st.State.String(), Detail: st.Detail}
	}
	return out, err
}

func (s supervisorSocket) HoldAll(ctx context.Context) (backup.ProgramHold, error) {
	h, err := s.c.Hold(ctx, "all")
	if err != nil {
		return backup.ProgramHold{}, err
	}
	released := new(atomic.Bool)
	s.watch.WatchHold(h.Done(), released)
	ph := backup.ProgramHold{Release: func() error { released.Store(true); return h.Release() }}
	for _, r := range h.Results {
		ph.Results = append(ph.Results, backup.ProgramState{Name: r.Name, State: r.State.String(), Detail: r.Error})
	}
	return ph, nil
}

func (s supervisorSocket) Start(ctx context.Context, names ...string) (bool, error) {
	res, err := s.c.Start(ctx, names...)
	held := slices.ContainsFunc(res, func(r supervisor.Result) bool { return strings.Contains(r.Error, "stopped by a hold") })
	return held, err
}

// installRuntime is backup.Runtime over the installer, configured like
// `hbx install` but for the archive's image when it names one.
type installRuntime struct {
	g   *globals
	cfg *config.Config
}

func (r installRuntime) Install(ctx context.Context, image, platform string, manifest digest.Digest) (bool, error) {
	opts, err := installerOptions(r.g, r.cfg)
	if err != nil {
		return false, err
	}
	if image != "" && image != opts.Image {
		opts.Image, opts.PlatformDigest = image, ""
	}
	if manifest != "" && platform == opts.Platform {
		opts.PlatformDigest = manifest
	}
	res, err := installer.Install(ctx, opts)
	if err != nil {
		return false, err
	}
	return res.Changed, nil
}

// backupJSONProgress writes backup and restore events as JSON lines.
type backupJSONProgress struct{ enc *json.Encoder }

func newBackupJSONProgress(w io.Writer) *backupJSONProgress {
	return &backupJSONProgress{enc: json.NewEncoder(w)}
}

func (p *backupJSONProgress) Event(e backup.Event) {
	_ = p.enc.Encode(struct {
		Time time.Time `json:"time"`
		backup.Event
	}{time.Now().UTC(), e})
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
