package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/installer/progress"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/export"
	"github.com/hermesbox/hbx/internal/ui"
)

type exportOptions struct {
	file string
	json bool
}

// newExportCommand builds `hbx export FILE`.
func newExportCommand(g *globals) *cobra.Command {
	var o exportOptions
	cmd := &cobra.Command{
		Use:   "export FILE",
		Short: "Write the active release's image as an OCI archive",
		Long: `Export writes the active release's image to FILE as an OCI archive (an
OCI image layout in a tar, what skopeo calls oci-archive), for carrying to
another box: there hbx install --from FILE installs the same release,
checked by digest. The index, the installed platform's manifest, its
config and its layers are copied bit-identical from the runtime
directory's blob store, each re-hashed on the way; index.json names the
image by its tag. The index lists other platforms whose manifests were
never fetched: the archive holds the installed platform's blobs only, so
a tool that copies every platform (skopeo copy --all) will not accept it.

FILE is written durably under a temporary name in its directory and
renamed into place (mode 0644) only when complete: on failure nothing is
at FILE, and an existing archive there is replaced only by a complete
one; a directory or symlink at FILE is refused, and so is a FILE inside
the runtime, data, state or backup directory. FILE "-" writes to
stdout, never a terminal (on failure the stream stops short). Ctrl-C
stops it, leaving nothing at FILE. Two exports of one release
are byte-identical. Export holds the runtime directory's lock, so an
install, upgrade or backup waits for it.

It needs the active release's blobs (install.keep_blobs, on by default):
when one is missing or damaged it says which and refuses; run hbx install
--verify to fetch them (hbx install --verify --from FILE offline), after
setting install.keep_blobs: true if it is off.`,
		Args: cli.Args(1, 1),
		RunE: g.configured(func(cmd *cobra.Command, args []string, cfg *config.Config, srcs *config.Sources) error {
			o.file = args[0]
			return runExport(cmd.Context(), g, cfg, o)
		}),
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print the result as a JSON line")
	return cmd
}

// runExport exports the active release and prints what was written: on
// stdout, or on stderr when the archive goes to stdout.
func runExport(ctx context.Context, g *globals, cfg *config.Config, o exportOptions) error {
	if o.file == "-" && progress.IsTerminal(g.stdout) {
		return cli.Usagef("export: refuse to write an archive to a terminal: redirect stdout or name a FILE")
	}
	if err := export.CheckTarget(o.file, verbopts.KeptDirs(cfg)); err != nil {
		return cli.Usagef("export: %w", err)
	}
	res, err := export.Export(ctx, verbopts.Export(cfg, g.log), o.file, g.stdout)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	out := g.stdout
	if o.file == "-" {
		out = g.stderr
	}
	if o.json {
		return ui.ExportJSON(out, res)
	}
	_, err = io.WriteString(out, ui.ExportText(res))
	return err
}
