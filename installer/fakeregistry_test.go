package installer

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// fakeRegistry is an in-process distribution API that serves exactly the
// bytes it is given, under whatever digest it is told: it can lie, which
// the real registry (used by the e2e tests) never does.
type fakeRegistry struct {
	t         *testing.T
	srv       *httptest.Server
	mu        sync.Mutex
	manifests map[string]served // by digest or tag
	blobs     map[digest.Digest][]byte
	requests  []string
	// gate, when set, holds every blob request until it is closed.
	gate chan struct{}
}

type served struct {
	body      []byte
	mediaType string
}

func newFakeRegistry(t *testing.T) *fakeRegistry {
	r := &fakeRegistry{t: t, manifests: map[string]served{}, blobs: map[digest.Digest][]byte{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *fakeRegistry) host() string { return strings.TrimPrefix(r.srv.URL, "http://") }

func (r *fakeRegistry) requestCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.requests)
}

// requestsFor counts the requests whose path contains s.
func (r *fakeRegistry) requestsFor(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.requests {
		if strings.Contains(q, s) {
			n++
		}
	}
	return n
}

func (r *fakeRegistry) blobRequests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.requests {
		if strings.Contains(q, "/blobs/") {
			n++
		}
	}
	return n
}

func (r *fakeRegistry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.requests = append(r.requests, req.Method+" "+req.URL.Path)
	r.mu.Unlock()
	p := req.URL.Path
	if p == "/v2/" || p == "/v2" {
		w.WriteHeader(http.StatusOK)
		return
	}
	if i := strings.Index(p, "/manifests/"); i >= 0 {
		r.mu.Lock()
		m, ok := r.manifests[p[i+len("/manifests/"):]]
		r.mu.Unlock()
		if !ok {
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", m.mediaType)
		w.Write(m.body)
		return
	}
	if i := strings.Index(p, "/blobs/"); i >= 0 {
		r.mu.Lock()
		gate := r.gate
		r.mu.Unlock()
		if gate != nil {
			<-gate
		}
		r.mu.Lock()
		b, ok := r.blobs[digest.Digest(p[i+len("/blobs/"):])]
		r.mu.Unlock()
		if !ok {
			http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
		return
	}
	http.NotFound(w, req)
}

// testImage is a multi-platform image under construction. Mutate its parts
// before publish to make it hostile.
type testImage struct {
	Layers    map[string][]v1.Descriptor // platform -> layer descriptors
	layerData map[digest.Digest][]byte
	Configs   map[string]*v1.Image
	Platforms []v1.Platform
}

type layerSpec struct {
	tar        []byte
	mediaType  string // default gzip
	wrongBlob  bool   // serve other bytes than the digest names
	wrongDiff  bool   // record a wrong diff_id
	badDigest  string // put this string in the descriptor instead
	foreignURL bool
}

func compress(t *testing.T, tarb []byte, mt string) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch mt {
	case v1.MediaTypeImageLayerGzip:
		zw := gzip.NewWriter(&buf)
		zw.Write(tarb)
		zw.Close()
	case v1.MediaTypeImageLayerZstd:
		zw, _ := zstd.NewWriter(&buf)
		zw.Write(tarb)
		zw.Close()
	default:
		buf.Write(tarb)
	}
	return buf.Bytes()
}

// imageParts describes one platform's image.
type imageParts struct {
	platform v1.Platform
	layers   []layerSpec
	config   v1.ImageConfig
	// configPlatform overrides the os/arch written into the config.
	configPlatform *v1.Platform
}

// published names what publish pushed.
type published struct {
	ref       string // host/name:tag@index-digest
	index     digest.Digest
	manifests map[string]digest.Digest // "os/arch" -> manifest digest
}

// publish stores an index of the given platform images in the registry.
func (r *fakeRegistry) publish(t *testing.T, name string, parts ...imageParts) published {
	t.Helper()
	out := published{manifests: map[string]digest.Digest{}}
	var idx v1.Index
	idx.Versioned = specs.Versioned{SchemaVersion: 2}
	idx.MediaType = v1.MediaTypeImageIndex
	for _, p := range parts {
		var diffs []digest.Digest
		var descs []v1.Descriptor
		for _, l := range p.layers {
			mt := l.mediaType
			if mt == "" {
				mt = v1.MediaTypeImageLayerGzip
			}
			blob := compress(t, l.tar, mt)
			d := digest.FromBytes(blob)
			served := blob
			if l.wrongBlob {
				served = append(append([]byte(nil), blob...), 0)
				served = served[:len(blob)]
				served[len(served)/2] ^= 0xff
			}
			r.blobs[d] = served
			diff := digest.FromBytes(l.tar)
			if l.wrongDiff {
				diff = digest.FromString("not the layer")
			}
			diffs = append(diffs, diff)
			desc := v1.Descriptor{MediaType: mt, Digest: d, Size: int64(len(blob))}
			if l.badDigest != "" {
				desc.Digest = digest.Digest(l.badDigest)
			}
			if l.foreignURL {
				desc.URLs = []string{"http://example.invalid/layer"}
			}
			descs = append(descs, desc)
		}
		cp := p.platform
		if p.configPlatform != nil {
			cp = *p.configPlatform
		}
		cfg := v1.Image{Platform: v1.Platform{OS: cp.OS, Architecture: cp.Architecture, Variant: cp.Variant}, Config: p.config,
			RootFS: v1.RootFS{Type: "layers", DiffIDs: diffs}}
		cb, _ := json.Marshal(cfg)
		cd := digest.FromBytes(cb)
		r.blobs[cd] = cb
		m := v1.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest,
			Config: v1.Descriptor{MediaType: v1.MediaTypeImageConfig, Digest: cd, Size: int64(len(cb))}, Layers: descs}
		mb, _ := json.Marshal(m)
		md := digest.FromBytes(mb)
		r.manifests[md.String()] = served{mb, v1.MediaTypeImageManifest}
		plat := p.platform
		idx.Manifests = append(idx.Manifests, v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: md, Size: int64(len(mb)), Platform: &plat})
		out.manifests[plat.OS+"/"+plat.Architecture] = md
	}
	ib, _ := json.Marshal(idx)
	out.index = digest.FromBytes(ib)
	r.manifests[out.index.String()] = served{ib, v1.MediaTypeImageIndex}
	r.manifests["test"] = served{ib, v1.MediaTypeImageIndex}
	out.ref = r.host() + "/" + name + ":test@" + out.index.String()
	return out
}

var tarHeaderChar = tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Devmajor: 1, Devminor: 3, Mode: 0o666}

// published returns layer i of the host platform's manifest in p.
func (r *fakeRegistry) published(t *testing.T, p published, i int) v1.Descriptor {
	t.Helper()
	m := r.manifests[p.manifests["linux/"+runtime.GOARCH].String()]
	var man v1.Manifest
	if err := json.Unmarshal(m.body, &man); err != nil {
		t.Fatal(err)
	}
	return man.Layers[i]
}
