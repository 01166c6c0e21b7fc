// SPDX-License-Identifier: Apache-2.0

package testimage_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
)

func TestPushToRegistry(t *testing.T) {
	reg := testenv.StartRegistry(t)
	dir := t.TempDir()
	img, err := testimage.BuildLayout(dir, testimage.Options{BunTarballs: fakeBunTarballs(t)})
	if err != nil {
		t.Fatalf("BuildLayout() = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := reg.Host() + "/executor-selfhost:test"
	for i := range 2 { // the second push finds every blob present
		start := time.Now()
		got, err := testimage.Push(ctx, dir, ref)
		if err != nil {
			t.Fatalf("Push #%d = %v", i+1, err)
		}
		t.Logf("push #%d took %v", i+1, time.Since(start).Round(time.Millisecond))
		if got != img.IndexDigest {
			t.Fatalf("Push #%d = %s, want the layout's index %s", i+1, got, img.IndexDigest)
		}
	}

	base := reg.URL() + "/v2/executor-selfhost"
	for _, tc := range []struct {
		ref, mediaType string
		want           digest.Digest
	}{
		{img.IndexDigest.String(), ocispec.MediaTypeImageIndex, img.IndexDigest},
		{"test", ocispec.MediaTypeImageIndex, img.IndexDigest},
		{img.Manifests["linux/amd64"].String(), ocispec.MediaTypeImageManifest, img.Manifests["linux/amd64"]},
		{img.Manifests["linux/arm64"].String(), ocispec.MediaTypeImageManifest, img.Manifests["linux/arm64"]},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/manifests/"+tc.ref, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", ocispec.MediaTypeImageIndex+", "+ocispec.MediaTypeImageManifest)
		body, resp := do(t, req)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET manifests/%s = %s: %s", tc.ref, resp.Status, body)
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != tc.mediaType {
			t.Errorf("GET manifests/%s Content-Type = %q, want %q", tc.ref, got, tc.mediaType)
		}
		if got := digest.FromBytes(body); got != tc.want {
			t.Errorf("GET manifests/%s body digest = %s, want %s", tc.ref, got, tc.want)
		}
		if got := resp.Header.Get("Docker-Content-Digest"); got != tc.want.String() {
			t.Errorf("GET manifests/%s Docker-Content-Digest = %q, want %s", tc.ref, got, tc.want)
		}
	}

	// Every blob, the zstd layer included, is served under its digest.
	_, _, images := readLayout(t, dir)
	for _, im := range images {
		for _, d := range append([]ocispec.Descriptor{im.manifest.Config}, im.manifest.Layers...) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/blobs/"+d.Digest.String(), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, resp := do(t, req)
			if resp.StatusCode != http.StatusOK || digest.FromBytes(body) != d.Digest {
				t.Errorf("GET blobs/%s (%s) = %s, body digest %s", d.Digest, d.MediaType, resp.Status, digest.FromBytes(body))
			}
		}
	}
}

func TestPushRefusesBadLayout(t *testing.T) {
	ctx := context.Background()
	if _, err := testimage.Push(ctx, t.TempDir(), "127.0.0.1:1/x:y"); err == nil {
		t.Errorf("Push(empty dir) = nil error, want one")
	}
}

func do(t *testing.T, req *http.Request) ([]byte, *http.Response) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return body, resp
}
