package installer

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"

	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/types"
)

// RegistryOptions is how hbx talks to registries.
type RegistryOptions struct {
	// InsecureHosts lists host[:port] reached over plain HTTP. Config
	// validation keeps it to loopback hosts.
	InsecureHosts []string
	// AuthFile is a containers auth.json or docker config.json; "" means
	// anonymous pulls.
	AuthFile string
	// Retries is how many times a failed blob fetch is retried.
	Retries int
}

// systemContext builds the only inputs the image library gets: nothing from
// /etc/containers, /etc/docker or the user's home unless configured.
func systemContext(ref reference.Named, opts RegistryOptions, scratch string) (*types.SystemContext, error) {
	nowhere := filepath.Join(scratch, "none") // never created
	// The library insists on reading a registries.conf when one is named:
	// give it an empty one of our own.
	conf := filepath.Join(scratch, "registries.conf")
	if err := os.WriteFile(conf, nil, 0o600); err != nil {
		return nil, fmt.Errorf("write empty registries.conf: %w", err)
	}
	sys := &types.SystemContext{
		SystemRegistriesConfPath:    conf,
		SystemRegistriesConfDirPath: nowhere,
		RegistriesDirPath:           nowhere,
		UserShortNameAliasConfPath:  nowhere,
		SignaturePolicyPath:         nowhere,
		DockerPerHostCertDirPath:    nowhere,
		DockerCertPath:              nowhere,
		BigFilesTemporaryDir:        scratch,
		DockerRegistryUserAgent:     "hbx",
		DockerDisableV1Ping:         true,
	}
	if opts.AuthFile != "" {
		sys.AuthFilePath = opts.AuthFile
		sys.LegacyFormatAuthFilePath = nowhere
	} else {
		sys.DockerAuthConfig = &types.DockerAuthConfig{} // anonymous
	}
	if isInsecure(reference.Domain(ref), opts.InsecureHosts) {
		sys.DockerInsecureSkipTLSVerify = types.OptionalBoolTrue
	}
	return sys, nil
}

func isInsecure(domain string, hosts []string) bool {
	if slices.Contains(hosts, domain) {
		return true
	}
	// "127.0.0.1" also covers "127.0.0.1:5000".
	if h, _, err := net.SplitHostPort(domain); err == nil {
		return slices.Contains(hosts, h)
	}
	return false
}

// openSource opens the image by digest only (the image library refuses
// name:tag@digest, and the tag adds nothing once the digest is pinned).
func openSource(ctx context.Context, ref reference.Canonical, opts RegistryOptions, scratch string) (types.ImageSource, error) {
	byDigest, err := reference.WithDigest(reference.TrimNamed(ref), ref.Digest())
	if err != nil {
		return nil, fmt.Errorf("build reference: %w", err)
	}
	iref, err := docker.NewReference(byDigest)
	if err != nil {
		return nil, fmt.Errorf("build reference: %w", err)
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return nil, fmt.Errorf("create scratch directory: %w", err)
	}
	sys, err := systemContext(ref, opts, scratch)
	if err != nil {
		return nil, err
	}
	src, err := iref.NewImageSource(ctx, sys)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", reference.Domain(ref), err)
	}
	return src, nil
}
