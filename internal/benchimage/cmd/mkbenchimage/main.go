// Command mkbenchimage builds the benchmark image (package benchimage) as an
// OCI layout, reusing a previous build in the same directory, and pushes it.
//
//	mkbenchimage -out DIR [-scale 1] [-version 1|2] [-files N] [-push HOST/REPO:TAG | -registry DIR [-repo NAME:TAG]]
//
// -version 2 builds the upgrade of the same scale: the same base layers
// under a new top layer (use another -out directory for it). -files N
// builds the entry-count image: the base layer and N small files.
// It prints key=value lines: layout=, index=, manifest=, files=,
// uncompressed=, compressed= and, when pushed, registry= (with -registry)
// and ref=HOST/REPO:TAG@sha256:... last. With -registry it starts the real
// docker-registry with its state in DIR, pushes, and serves until SIGINT or
// SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/hermesbox/hbx/internal/benchimage"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "mkbenchimage: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("mkbenchimage", flag.ContinueOnError)
	out := fs.String("out", "", "layout directory (reused when it holds a finished build of the same scale)")
	scale := fs.Float64("scale", 1, "image size: 1 is the BENCHMARKING.md shape")
	push := fs.String("push", "", "push to this reference")
	registry := fs.String("registry", "", "start a registry with its state here, push to it and serve until signalled")
	repo := fs.String("repo", "bench/app:v1", "repository and tag to push to with -registry")
	version := fs.Int("version", 1, "image version: 2 is the upgrade, the same base layers under a new top layer")
	files := fs.Int("files", 0, "build the entry-count image instead: the base layer and one layer of this many small files")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("-out is required")
	}
	marker := filepath.Join(*out, "benchimage.json")
	var img benchimage.Image
	if b, err := os.ReadFile(marker); err == nil && json.Unmarshal(b, &img) == nil {
		img.Dir = *out
	} else {
		os.RemoveAll(*out)
		built, err := benchimage.Build(*out, benchimage.Options{Scale: *scale, Version: *version, SmallFiles: *files})
		if err != nil {
			return err
		}
		img = *built
		b, _ := json.Marshal(img)
		if err := os.WriteFile(marker, b, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "layout=%s\nindex=%s\nmanifest=%s\nfiles=%d\nuncompressed=%d\ncompressed=%d\n",
		img.Dir, img.IndexDigest, img.Manifest, img.Files, img.Uncompressed, img.Compressed)
	var reg *testenv.Registry
	if *registry != "" {
		var err error
		if reg, err = testenv.Start(*registry); err != nil {
			return err
		}
		defer reg.Close()
		*push = reg.Host() + "/" + *repo
		fmt.Fprintf(stdout, "registry=%s\n", reg.Host())
	}
	if *push != "" {
		d, err := testimage.Push(ctx, img.Dir, *push)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ref=%s@%s\n", *push, d)
	}
	if reg != nil {
		<-ctx.Done()
	}
	return nil
}
