// SPDX-License-Identifier: Apache-2.0

// Command mktestimage builds hbx's test image as an OCI image layout and
// optionally pushes it, for make demo and the benchmark scripts.
//
//	mktestimage [-out DIR] [-version V] [-state-format N] [-platforms LIST]
//	            [-push REF | -registry DIR [-repo NAME:TAG] [-serve=false]]
//	            [-tls-context DIR -tls-host NAME -base IMAGE]
//
// It prints machine-readable key=value lines on stdout:
//
//	layout=/abs/dir
//	index=sha256:...
//	linux/amd64=sha256:...
//	linux/arm64=sha256:...
//	registry=127.0.0.1:PORT              (with -registry)
//	ref=HOST/REPO:TAG@sha256:...         (when pushed; the index digest)
//
// With -registry it starts the real docker-registry with its state in DIR,
// pushes to it, prints the lines above and keeps the registry running until
// SIGINT or SIGTERM (with -serve=false it stops after the push; the
// registry's storage stays in DIR/storage). -tls-context writes the build
// context of a TLS registry container for host NAME FROM IMAGE
// (testenv.TLSRegistryContext; make docker-demo serves DIR/storage with
// it) and prints tls-context=DIR. The Bun tarballs come from the repository's .cache/npm
// (scripts/testdeps.sh).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "mktestimage: %v\n", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mktestimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "layout directory (default REPO/.cache/testimage/layout)")
	version := fs.String("version", testimage.DefaultVersion, "image release string")
	stateFormat := fs.Int("state-format", 1, "data format the image's server writes")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated platforms")
	shape := fs.String("shape", "", `image shape: "" (Debian), "wrapper", "distroless" or "tree"`)
	push := fs.String("push", "", "push to this reference (HOST/REPO:TAG)")
	registry := fs.String("registry", "", "start a registry with its state in this directory, push to it and serve until signalled")
	repo := fs.String("repo", "executor-selfhost:test", "repository and tag to push to with -registry")
	serve := fs.Bool("serve", true, "with -registry: serve until signalled after the push")
	tlsContext := fs.String("tls-context", "", "write a TLS registry container's build context (registry, CA, certificate) into this directory")
	tlsHost := fs.String("tls-host", "registry.hbx.test", "with -tls-context: the registry's host name")
	base := fs.String("base", "hbx-base:bookworm", "with -tls-context: the glibc base image")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *push != "" && *registry != "" {
		return errors.New("-push and -registry are exclusive")
	}

	if *tlsContext != "" {
		if _, err := testenv.TLSRegistryContext(*tlsContext, *tlsHost, *base); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "tls-context=%s\n", *tlsContext)
	}

	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := testenv.FindRepoRoot(wd)
	if err != nil {
		return err
	}
	tarballs, err := testimage.BunTarballs(root)
	if err != nil {
		return err
	}
	if *out == "" {
		*out = filepath.Join(root, ".cache", "testimage", "layout")
	}
	if *out, err = filepath.Abs(*out); err != nil {
		return err
	}

	start := time.Now()
	img, err := testimage.BuildLayout(*out, testimage.Options{
		BunTarballs: tarballs,
		Version:     *version,
		StateFormat: *stateFormat,
		Platforms:   strings.Split(*platforms, ","),
		Shape:       *shape,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "mktestimage: built %s in %v\n", img.Dir, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "layout=%s\nindex=%s\n", img.Dir, img.IndexDigest)
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		if d, ok := img.Manifests[p]; ok {
			fmt.Fprintf(stdout, "%s=%s\n", p, d)
		}
	}

	ref := *push
	var reg *testenv.Registry
	if *registry != "" {
		if reg, err = testenv.Start(*registry); err != nil {
			return err
		}
		defer reg.Close()
		fmt.Fprintf(stdout, "registry=%s\n", reg.Host())
		ref = reg.Host() + "/" + *repo
	}
	if ref == "" {
		return nil
	}
	start = time.Now()
	d, err := testimage.Push(ctx, img.Dir, ref)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "mktestimage: pushed in %v\n", time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "ref=%s@%s\n", ref, d)
	if reg == nil {
		return nil
	}
	if *serve {
		<-ctx.Done()
	}
	fmt.Fprintf(stderr, "mktestimage: stopping the registry\n")
	return reg.Close()
}
