package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/hostbox"
	"github.com/hermesbox/hbx/internal/cli"
)

// hostboxOptions are the inputs every `hbx box` subcommand shares.
type hostboxOptions struct {
	root   string // --dir, else hostbox.DefaultRoot
	docker hostbox.Docker
	stdout io.Writer
	stderr io.Writer
	wait   time.Duration // --wait of new, start, rotate-token
}

// newHostboxCommand builds `hbx box` and its subcommands.
func newHostboxCommand(g *globals) *cobra.Command {
	o := &hostboxOptions{docker: hostbox.Docker{Environ: g.env}, stdout: g.stdout, stderr: g.stderr}
	cmd := &cobra.Command{
		Use:   "box",
		Short: "Manage Docker-host boxes from the host (docker compose)",
		Long: `Box manages Docker-host boxes from the host: each box is a directory
<root>/NAME holding compose.yaml, .env, mcp.key and backup.pass, driven with
the docker compose CLI (plain "docker compose ps|logs|exec" work inside
it). The root is --dir, else $HBX_BOX_ROOT, else
$XDG_DATA_HOME/hbx/boxes, else ~/.local/share/hbx/boxes.`,
		Args: cobra.ArbitraryArgs, // cli.Group reports unknown subcommands
		RunE: cli.Group,
	}
	cmd.PersistentFlags().StringVar(&o.root, "dir", "", "the box root (default $HBX_BOX_ROOT, else ~/.local/share/hbx/boxes)")
	cmd.AddCommand(newBoxNewCommand(o), newBoxLsCommand(o), newBoxDoctorCommand(o),
		newBoxStopCommand(o), newBoxStartCommand(o), newBoxRmCommand(o),
		newBoxLogsCommand(o), newBoxEnterCommand(o), newBoxRotateCommand(o),
		newBoxSaveCommand(o), newBoxLoadCommand(o), newBoxConfigCommand(o))
	return cmd
}

// getenv reads k from the command's environment.
func (o *hostboxOptions) getenv(k string) string {
	for _, kv := range o.docker.Environ {
		if v, ok := strings.CutPrefix(kv, k+"="); ok {
			return v
		}
	}
	return ""
}

// resolveRoot fills o.root from the environment when --dir is not given.
func (o *hostboxOptions) resolveRoot() error {
	if o.root != "" {
		return nil
	}
	r, err := hostbox.DefaultRoot(o.getenv)
	o.root = r
	return boxError(err)
}

// boxError makes hostbox's refusals of bad input and unknown box names
// usage errors (exit 2).
func boxError(err error) error {
	if err != nil && (errors.Is(err, hostbox.ErrInvalid) || errors.Is(err, hostbox.ErrNotFound)) {
		return &cli.UsageError{Err: err}
	}
	return err
}

// boxRun is the RunE of a box subcommand: it resolves the root, then runs fn.
func (o *hostboxOptions) boxRun(fn func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := o.resolveRoot(); err != nil {
			return err
		}
		return boxError(fn(cmd.Context(), args))
	}
}

// newFlags are the flags new and load share.
type newFlags struct {
	n        hostbox.NewOptions
	sets     []string
	override string
}

func (nf *newFlags) bind(cmd *cobra.Command, o *hostboxOptions) {
	f := cmd.Flags()
	f.IntVar(&nf.n.Port, "port", 0, "the host port (default: the first free one from 4788 that no box of the root holds)")
	f.StringVar(&nf.n.BindAddress, "bind", "127.0.0.1", "the host address the port is published on")
	f.StringVar(&nf.n.ExecutorImage, "executor-image", "", "the executor image (default compose.yaml's, hbx-executor:latest)")
	f.StringVar(&nf.n.AgentImage, "agent-image", "", "the agent image (default $HBX_BOX_AGENT_IMAGE)")
	f.StringArrayVar(&nf.sets, "set", nil, "another variable of compose.yaml for .env, KEY=VALUE (repeatable)")
	f.StringVar(&nf.override, "override", "", "a Compose file copied into the box as compose.override.yaml")
	f.StringVar(&nf.n.ConfigDir, "config-dir", "", "a directory copied into the executor's /etc/hbx before its first start (hbx.yaml, certs.d/)")
	f.DurationVar(&o.wait, "wait", 5*time.Minute, "how long up waits for the box to be healthy")
}

// options completes the NewOptions of box name from the flags.
func (nf *newFlags) options(o *hostboxOptions, name string) (hostbox.NewOptions, error) {
	n := nf.n
	n.Root, n.Name, n.Wait = o.root, name, o.wait
	if n.AgentImage == "" {
		n.AgentImage = o.getenv("HBX_BOX_AGENT_IMAGE")
	}
	for _, s := range nf.sets {
		v, err := hostbox.ParseVar(s)
		if err != nil {
			return n, err
		}
		n.Set = append(n.Set, v)
	}
	if nf.override != "" {
		data, err := os.ReadFile(nf.override)
		if err != nil {
			return n, cli.Usagef("--override: %w", err)
		}
		n.Override = data
	}
	return n, nil
}

// newBoxNewCommand builds `hbx box new`.
func newBoxNewCommand(o *hostboxOptions) *cobra.Command {
	var nf newFlags
	cmd := &cobra.Command{
		Use:   "new NAME",
		Short: "Make a box directory, start the box and run its doctor",
		Long: `New makes <root>/NAME (compose.yaml, .env, a 256-bit mcp.key and
backup.pass, mode 0600), picks a free host port once (from 4788 up, or
--port) and keeps it in .env, starts the box (docker compose up --wait,
at most --wait) and runs its doctor before it says ready. A bad name (not a
DNS label), an existing box or project, or a port in use is refused with
nothing created; a later failure removes everything new made.`,
		Args: cli.Args(1, 1),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			n, err := nf.options(o, args[0])
			if err != nil {
				return err
			}
			return o.runNew(ctx, n)
		}),
	}
	nf.bind(cmd, o)
	return cmd
}

// newBoxSaveCommand builds `hbx box save`.
func newBoxSaveCommand(o *hostboxOptions) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "save NAME",
		Short: "One archive of the box: Executor's data (a cold hbx backup) and the agent's volume",
		Long: `Save writes one archive (-o, default ./NAME-<UTC time>.box.tar.gz.gpg, mode
0600), encrypted with the box's backup.pass like hbx backup's (gpg -d | tar
-xz reads it): executor.tar.gz.gpg, a cold hbx backup taken in the
executor, and agent/, the agent's volume, copied while the agent is
stopped (it is started again after).`,
		Args: cli.Args(1, 1),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			if out == "" {
				out = args[0] + "-" + time.Now().UTC().Format("20060102T150405Z") + ".box.tar.gz.gpg"
			}
			res, err := o.docker.Save(ctx, o.root, args[0], out)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "box %s saved to %s in %v\n", args[0], res.Path, res.Took.Round(100*time.Millisecond))
			return err
		}),
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the archive to write")
	return cmd
}

// newBoxLoadCommand builds `hbx box load`.
func newBoxLoadCommand(o *hostboxOptions) *cobra.Command {
	var nf newFlags
	var l hostbox.LoadOptions
	cmd := &cobra.Command{
		Use:   "load NAME ARCHIVE",
		Short: "Make box NAME from an archive of hbx box save, quiesced, with a fresh key",
		Long: `Load checks the whole archive with --passphrase-file (the saved box's
backup.pass, which becomes the new box's) before anything changes, then
makes the box as new does, with a fresh key: the agent's volume as saved,
Executor's data put back by hbx restore in the executor. The executor runs;
the agent is created but not started (hbx box start NAME). An existing box
of the name is refused unless --force, which first saves it beside ARCHIVE
(NAME-replaced-<time>.tar.gz.gpg, its passphrase in the same name + .pass)
and then removes it; a box that cannot be saved is not replaced.`,
		Args: cli.Args(2, 2),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			n, err := nf.options(o, args[0])
			if err != nil {
				return err
			}
			l.NewOptions, l.Archive = n, args[1]
			res, err := o.docker.Load(ctx, l)
			if res.Replaced != "" {
				fmt.Fprintf(o.stdout, "the box it replaces was saved to %s (passphrase: %s.pass)\n", res.Replaced, res.Replaced)
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "box %s loaded in %v: %s, agent stopped (hbx box start %s)\n", args[0], res.Took.Round(100*time.Millisecond), res.Box.URL(), args[0])
			return err
		}),
	}
	nf.bind(cmd, o)
	cmd.Flags().StringVar(&l.PassphraseFile, "passphrase-file", "", "the passphrase the archive was saved with (the saved box's backup.pass)")
	cmd.Flags().BoolVar(&l.Force, "force", false, "replace an existing box of the name, saving it beside ARCHIVE first")
	return cmd
}

// runNew runs New and prints the doctor's report and the box's URL.
func (o *hostboxOptions) runNew(ctx context.Context, n hostbox.NewOptions) error {
	res, err := o.docker.New(ctx, n)
	var de *hostbox.DoctorError
	if errors.As(err, &de) {
		renderReport(o.stderr, de.Report)
	}
	if err != nil {
		return err
	}
	renderReport(o.stdout, res.Report)
	_, err = fmt.Fprintf(o.stdout, "box %s ready in %v: %s (key %s)\n", res.Box.Name, res.Ready.Round(100*time.Millisecond), res.Box.URL(), res.Box.Path(hostbox.KeyFile))
	return err
}

// renderReport prints one line per check, with the remedy of a failure.
func renderReport(w io.Writer, r hostbox.Report) {
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%s %-11s %s\n", mark, c.Name, c.Detail)
		if !c.OK && c.Remedy != "" {
			fmt.Fprintf(w, "     remedy: %s\n", c.Remedy)
		}
	}
}

// newBoxLsCommand builds `hbx box ls`.
func newBoxLsCommand(o *hostboxOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the boxes: state, the executor's health, URL",
		Args:  cli.Args(0, 0),
		RunE: o.boxRun(func(ctx context.Context, _ []string) error {
			sts, err := o.docker.Statuses(ctx, o.root)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tHEALTH\tURL")
			for _, s := range sts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Box.Name, s.State, s.Health, s.Box.URL())
			}
			return tw.Flush()
		}),
	}
}

// newBoxDoctorCommand builds `hbx box doctor`.
func newBoxDoctorCommand(o *hostboxOptions) *cobra.Command {
	var window time.Duration
	cmd := &cobra.Command{
		Use:   "doctor NAME",
		Short: "Check a box from the host, then hbx health in its executor",
		Args:  cli.Args(1, 1),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			b, err := hostbox.Open(o.root, args[0])
			if err != nil {
				return err
			}
			r := o.docker.Doctor(ctx, b, window)
			renderReport(o.stdout, r)
			if !r.OK() {
				return fmt.Errorf("doctor %s: %s", b.Name, r.FirstFailure())
			}
			return nil
		}),
	}
	cmd.Flags().DurationVar(&window, "boot-window", hostbox.DefaultBootWindow, "how long the host probe retries a port that does not answer yet")
	return cmd
}

// newBoxStopCommand builds `hbx box stop`.
func newBoxStopCommand(o *hostboxOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "stop NAME",
		Short: "Stop both containers of a box",
		Args:  cli.Args(1, 1),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			took, err := o.docker.Stop(ctx, o.root, args[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "box %s stopped in %v\n", args[0], took.Round(100*time.Millisecond))
			return err
		}),
	}
}

// newBoxStartCommand builds `hbx box start`.
func newBoxStartCommand(o *hostboxOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "start NAME",
		Short: "Start both containers of a box and wait for health",
		Args:  cli.Args(1, 1),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			took, err := o.docker.Start(ctx, o.root, args[0], o.wait)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "box %s started and healthy in %v\n", args[0], took.Round(100*time.Millisecond))
			return err
		}),
	}
	cmd.Flags().DurationVar(&o.wait, "wait", 5*time.Minute, "how long to wait for the box to be healthy")
	return cmd
}

// newBoxRmCommand builds `hbx box rm`.
func newBoxRmCommand(o *hostboxOptions) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a box: containers, volumes (its data) and directory",
		Long: `Rm deletes the box's containers, networks and volumes (Executor's data
and the agent's with them) and its directory (the key and passphrase), once
the box's name is typed back on stdin, or with --yes.`,
		Args: cli.Args(1, 1),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			if _, err := hostbox.Open(o.root, args[0]); err != nil {
				return err
			}
			if !yes {
				fmt.Fprintf(o.stderr, "This deletes box %s and every volume of it (its data). Type the box's name to confirm: ", args[0])
				line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
				if strings.TrimSpace(line) != args[0] {
					return cli.Usagef("rm %s: the name typed back was %q: nothing removed", args[0], strings.TrimSpace(line))
				}
			}
			took, err := o.docker.Remove(ctx, o.root, args[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "box %s removed in %v\n", args[0], took.Round(100*time.Millisecond))
			return err
		}),
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for the name")
	return cmd
}

// newBoxLogsCommand builds `hbx box logs`, a pass-through.
func newBoxLogsCommand(o *hostboxOptions) *cobra.Command {
	var follow bool
	var tail string
	cmd := &cobra.Command{
		Use:   "logs NAME [SERVICE...]",
		Short: "docker compose logs of the box (executor, agent or both)",
		Args:  cli.Args(1, -1),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			pass := []string{"--no-color", "--tail", tail}
			if follow {
				pass = append(pass, "--follow")
			}
			s := hostbox.Streams{In: os.Stdin, Out: o.stdout, Err: o.stderr}
			return o.docker.Logs(ctx, o.root, args[0], s, append(pass, args[1:]...))
		}),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output")
	cmd.Flags().StringVarP(&tail, "tail", "n", "all", "the last N lines of each container")
	return cmd
}

// newBoxEnterCommand builds `hbx box enter`, a pass-through.
func newBoxEnterCommand(o *hostboxOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "enter NAME [-- COMMAND...]",
		Short: "A shell (or COMMAND) in the box's agent container",
		Args:  cli.Args(1, -1),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			tty := isTerminal(os.Stdin)
			s := hostbox.Streams{In: os.Stdin, Out: o.stdout, Err: o.stderr}
			return o.docker.Enter(ctx, o.root, args[0], s, tty, args[1:])
		}),
	}
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// newBoxRotateCommand builds `hbx box rotate-token`.
func newBoxRotateCommand(o *hostboxOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rotate-token NAME",
		Short: "Mint a new key, recreate the box, check old key 401 and new 200",
		Args:  cli.Args(1, 1),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			res, err := o.docker.RotateToken(ctx, o.root, args[0], o.wait)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "box %s: new key in place in %v (old key %d, new key %d)\n", args[0], res.Took.Round(100*time.Millisecond), res.OldCode, res.NewCode)
			return err
		}),
	}
	cmd.Flags().DurationVar(&o.wait, "wait", 5*time.Minute, "how long to wait for the box to be healthy")
	return cmd
}

// newBoxConfigCommand builds `hbx box config`.
func newBoxConfigCommand(o *hostboxOptions) *cobra.Command {
	var edit bool
	cmd := &cobra.Command{
		Use:   "config NAME",
		Short: "Print the box's hbx.yaml, or edit it (--edit): checked by hbx, switched in, executor restarted",
		Long: `Config prints the executor's /etc/hbx/hbx.yaml of box NAME. With --edit
it opens a copy in $VISUAL, else $EDITOR, else vi; when the file changed,
the executor's own hbx checks it (hbx config show: a refusal exits 2 and
changes nothing), it replaces the file in one rename, and the executor is
restarted and waited for (--wait). The executor must be running.`,
		Args: cli.Args(1, 1),
		RunE: o.boxRun(func(ctx context.Context, args []string) error {
			if !edit {
				data, err := o.docker.Config(ctx, o.root, args[0])
				if err != nil {
					return err
				}
				_, err = o.stdout.Write(data)
				return err
			}
			res, err := o.docker.EditConfig(ctx, o.root, args[0], o.runEditor, o.wait)
			if err != nil {
				return err
			}
			if !res.Changed {
				_, err = fmt.Fprintf(o.stdout, "box %s: config unchanged\n", args[0])
				return err
			}
			_, err = fmt.Fprintf(o.stdout, "box %s: config checked, switched in, executor healthy in %v\n", args[0], res.Took.Round(100*time.Millisecond))
			return err
		}),
	}
	cmd.Flags().BoolVar(&edit, "edit", false, "edit the file in $VISUAL/$EDITOR, then check, switch in and restart")
	cmd.Flags().DurationVar(&o.wait, "wait", 5*time.Minute, "how long to wait for the executor to be healthy after an edit")
	return cmd
}

// runEditor runs the operator's editor on path on the terminal.
func (o *hostboxOptions) runEditor(path string) error {
	argv := hostbox.EditorCommand(o.getenv, path)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = o.docker.Environ
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, o.stdout, o.stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("run the editor (%s): %w", argv[2], err)
	}
	return nil
}
