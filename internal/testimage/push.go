// SPDX-License-Identifier: Apache-2.0

package testimage

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// Push copies the image index of the OCI image layout layoutDir, with every
// platform's image, to ref (host[:port]/repository[:tag], e.g.
// "127.0.0.1:5000/executor-selfhost:test"; no tag means "latest"), keeping
// every digest, and returns the index digest the registry now serves. It
// fails if that digest differs from the layout's.
//
// Push reads no host configuration (registries.conf, policy.json,
// registries.d, certificates, credentials) and pushes anonymously. It uses
// plain HTTP when the registry host is a loopback address or "localhost", and
// verified HTTPS otherwise.
func Push(ctx context.Context, layoutDir, ref string) (digest.Digest, error) {
	d, err := push(ctx, layoutDir, ref)
	if err != nil {
		return "", fmt.Errorf("push test image to %s: %w", ref, err)
	}
	return d, nil
}

func push(ctx context.Context, layoutDir, ref string) (digest.Digest, error) {
	want, err := layoutIndexDigest(layoutDir)
	if err != nil {
		return "", err
	}
	src, err := layout.NewIndexReference(layoutDir, 0)
	if err != nil {
		return "", fmt.Errorf("open layout: %w", err)
	}
	dst, err := docker.ParseReference("//" + ref)
	if err != nil {
		return "", fmt.Errorf("parse reference: %w", err)
	}
	host, _, _ := strings.Cut(dst.DockerReference().Name(), "/")

	// Point every implicit configuration path into an empty directory; only
	// registries.conf must exist, and is empty.
	empty, err := os.MkdirTemp("", "hbx-push-")
	if err != nil {
		return "", fmt.Errorf("create config directory: %w", err)
	}
	defer os.RemoveAll(empty)
	none := func(name string) string { return filepath.Join(empty, name) }
	if err := os.WriteFile(none("registries.conf"), nil, 0o644); err != nil {
		return "", fmt.Errorf("write empty registries.conf: %w", err)
	}
	sys := &types.SystemContext{
		RootForImplicitAbsolutePaths: none("root"),
		SignaturePolicyPath:          none("policy.json"),
		RegistriesDirPath:            none("registries.d"),
		SystemRegistriesConfPath:     none("registries.conf"),
		SystemRegistriesConfDirPath:  none("registries.conf.d"),
		UserShortNameAliasConfPath:   none("shortnames.conf"),
		BlobInfoCacheDir:             none("cache"),
		DockerPerHostCertDirPath:     none("certs.d"),
		DockerAuthConfig:             &types.DockerAuthConfig{},
		DockerInsecureSkipTLSVerify:  types.NewOptionalBool(isLoopback(host)),
		DockerRegistryUserAgent:      "hbx-testimage",
	}
	policy, err := signature.NewPolicyContext(&signature.Policy{
		Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()},
	})
	if err != nil {
		return "", fmt.Errorf("create signature policy: %w", err)
	}
	defer policy.Destroy()

	manifest, err := copy.Image(ctx, policy, dst, src, &copy.Options{
		ImageListSelection: copy.CopyAllImages,
		PreserveDigests:    true,
		SourceCtx:          sys,
		DestinationCtx:     sys,
	})
	if err != nil {
		return "", fmt.Errorf("copy: %w", err)
	}
	if got := digest.FromBytes(manifest); got != want {
		return "", fmt.Errorf("registry has index %s, layout has %s", got, want)
	}
	return want, nil
}

// layoutIndexDigest returns the digest of the single image index listed in
// dir's index.json.
func layoutIndexDigest(dir string) (digest.Digest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ocispec.ImageIndexFile))
	if err != nil {
		return "", fmt.Errorf("read layout: %w", err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return "", fmt.Errorf("parse layout index.json: %w", err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != ocispec.MediaTypeImageIndex {
		return "", fmt.Errorf("layout index.json: want exactly one image index, have %d descriptors", len(idx.Manifests))
	}
	if err := idx.Manifests[0].Digest.Validate(); err != nil {
		return "", fmt.Errorf("layout index.json: %w", err)
	}
	return idx.Manifests[0].Digest, nil
}

// isLoopback reports whether host ("name" or "name:port") is a loopback
// address or localhost.
func isLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
