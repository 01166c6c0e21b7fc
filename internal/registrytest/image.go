// SPDX-License-Identifier: Apache-2.0

package registrytest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// PlatformImage is one platform's image for [NewImage].
type PlatformImage struct {
	Platform v1.Platform
	Layers   [][]byte // uncompressed tar streams, bottom first; stored tar+gzip
	Config   v1.ImageConfig
}

// Image is an OCI image index and everything it references, in memory.
type Image struct {
	Index     digest.Digest
	Manifests map[string]digest.Digest         // "os/arch" -> image manifest
	Configs   map[string]digest.Digest         // "os/arch" -> config blob
	Layers    map[string][]v1.Descriptor       // "os/arch" -> layer descriptors
	blobs     map[digest.Digest][]byte         // configs and layers
	docs      map[digest.Digest]servedDocument // manifests and the index
}

type servedDocument struct {
	body      []byte
	mediaType string
}

// NewImage builds an index of the given platforms' images. Layers are
// gzipped without names or times, so the same input gives the same digests.
func NewImage(plats ...PlatformImage) (*Image, error) {
	img := &Image{
		Manifests: map[string]digest.Digest{}, Configs: map[string]digest.Digest{},
		Layers: map[string][]v1.Descriptor{}, blobs: map[digest.Digest][]byte{}, docs: map[digest.Digest]servedDocument{},
	}
	idx := v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex}
	for _, p := range plats {
		key := p.Platform.OS + "/" + p.Platform.Architecture
		var diffs []digest.Digest
		var layers []v1.Descriptor
		for _, tarb := range p.Layers {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			if _, err := zw.Write(tarb); err != nil {
				return nil, fmt.Errorf("compress layer: %w", err)
			}
			if err := zw.Close(); err != nil {
				return nil, fmt.Errorf("compress layer: %w", err)
			}
			d := digest.FromBytes(buf.Bytes())
			img.blobs[d] = buf.Bytes()
			diffs = append(diffs, digest.FromBytes(tarb))
			layers = append(layers, v1.Descriptor{MediaType: v1.MediaTypeImageLayerGzip, Digest: d, Size: int64(buf.Len())})
		}
		cfg := v1.Image{
			Platform: v1.Platform{OS: p.Platform.OS, Architecture: p.Platform.Architecture, Variant: p.Platform.Variant},
			Config:   p.Config,
			RootFS:   v1.RootFS{Type: "layers", DiffIDs: diffs},
		}
		cb, err := json.Marshal(cfg)
		if err != nil {
			return nil, fmt.Errorf("encode config: %w", err)
		}
		cd := digest.FromBytes(cb)
		img.blobs[cd] = cb
		m := v1.Manifest{
			Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest,
			Config: v1.Descriptor{MediaType: v1.MediaTypeImageConfig, Digest: cd, Size: int64(len(cb))}, Layers: layers,
		}
		mb, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encode manifest: %w", err)
		}
		md := digest.FromBytes(mb)
		img.docs[md] = servedDocument{mb, v1.MediaTypeImageManifest}
		plat := p.Platform
		idx.Manifests = append(idx.Manifests, v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: md, Size: int64(len(mb)), Platform: &plat})
		img.Manifests[key], img.Configs[key], img.Layers[key] = md, cd, layers
	}
	ib, err := json.Marshal(idx)
	if err != nil {
		return nil, fmt.Errorf("encode index: %w", err)
	}
	img.Index = digest.FromBytes(ib)
	img.docs[img.Index] = servedDocument{ib, v1.MediaTypeImageIndex}
	return img, nil
}

// Blob returns the bytes of a config or layer blob, or of a manifest or
// the index, by digest; nil when the image has none.
func (img *Image) Blob(d digest.Digest) []byte {
	if b, ok := img.blobs[d]; ok {
		return b
	}
	return img.docs[d].body
}

// Push uploads the image to the registry at base ("http://127.0.0.1:5000")
// as repo:tag with the distribution API (monolithic blob uploads, then the
// manifests, then the index under tag), anonymously.
func (img *Image) Push(ctx context.Context, base, repo, tag string) error {
	if err := img.push(ctx, base, repo, tag); err != nil {
		return fmt.Errorf("push %s:%s to %s: %w", repo, tag, base, err)
	}
	return nil
}

func (img *Image) push(ctx context.Context, base, repo, tag string) error {
	var blobs []digest.Digest
	for d := range img.blobs {
		blobs = append(blobs, d)
	}
	sort.Slice(blobs, func(i, j int) bool { return blobs[i] < blobs[j] })
	for _, d := range blobs {
		resp, err := do(ctx, http.MethodPost, base+"/v2/"+repo+"/blobs/uploads/", "", nil, http.StatusAccepted)
		if err != nil {
			return fmt.Errorf("start upload of %s: %w", d, err)
		}
		loc, err := resp.Location()
		if err != nil {
			return fmt.Errorf("start upload of %s: %w", d, err)
		}
		q := loc.Query()
		q.Set("digest", d.String())
		loc.RawQuery = q.Encode()
		if _, err := do(ctx, http.MethodPut, loc.String(), "application/octet-stream", img.blobs[d], http.StatusCreated); err != nil {
			return fmt.Errorf("upload %s: %w", d, err)
		}
	}
	for _, md := range img.Manifests {
		doc := img.docs[md]
		if _, err := do(ctx, http.MethodPut, base+"/v2/"+repo+"/manifests/"+md.String(), doc.mediaType, doc.body, http.StatusCreated); err != nil {
			return fmt.Errorf("put manifest %s: %w", md, err)
		}
	}
	doc := img.docs[img.Index]
	if _, err := do(ctx, http.MethodPut, base+"/v2/"+repo+"/manifests/"+url.PathEscape(tag), doc.mediaType, doc.body, http.StatusCreated); err != nil {
		return fmt.Errorf("put index %s: %w", img.Index, err)
	}
	return nil
}

// do sends one request and checks its status, returning the response with
// its body read and closed.
func do(ctx context.Context, method, u, contentType string, body []byte, want int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, bytes.TrimSpace(msg))
	}
	return resp, nil
}

// PushSingle pushes the image as Push does, then points tag at plat's
// manifest instead of the index: a tag that names a single manifest.
func (img *Image) PushSingle(ctx context.Context, base, repo, tag, plat string) error {
	if err := img.Push(ctx, base, repo, tag); err != nil {
		return err
	}
	md, ok := img.Manifests[plat]
	if !ok {
		return fmt.Errorf("push %s:%s to %s: no manifest for %s", repo, tag, base, plat)
	}
	doc := img.docs[md]
	if _, err := do(ctx, http.MethodPut, base+"/v2/"+repo+"/manifests/"+url.PathEscape(tag), doc.mediaType, doc.body, http.StatusCreated); err != nil {
		return fmt.Errorf("push %s:%s to %s: put manifest %s: %w", repo, tag, base, md, err)
	}
	return nil
}
