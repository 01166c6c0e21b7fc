package installer

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestChildForSkipsAttestations: an index as buildx writes it, with
// attestation manifests (platform unknown/unknown, annotation
// vnd.docker.reference.type: attestation-manifest) beside the platform
// children, even listed first or claiming the wanted platform, gives the
// platform child; an index of attestations alone has no manifest for the
// platform and does not list them as platforms it has.
func TestChildForSkipsAttestations(t *testing.T) {
	amd64, arm64 := digest.FromString("amd64"), digest.FromString("arm64")
	att := func(s string, p *v1.Platform) v1.Descriptor {
		return v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: digest.FromString(s), Size: 1, Platform: p,
			Annotations: map[string]string{"vnd.docker.reference.type": "attestation-manifest", "vnd.docker.reference.digest": amd64.String()}}
	}
	unknown := &v1.Platform{OS: "unknown", Architecture: "unknown"}
	image := func(d digest.Digest, arch string) v1.Descriptor {
		return v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: d, Size: 1, Platform: &v1.Platform{OS: "linux", Architecture: arch}}
	}
	tests := []struct {
		name      string
		manifests []v1.Descriptor
		plat      Platform
		want      digest.Digest
		wantErr   string
	}{
		{"buildx order", []v1.Descriptor{image(amd64, "amd64"), image(arm64, "arm64"), att("a1", unknown), att("a2", unknown)}, Platform{"linux", "amd64", ""}, amd64, ""},
		{"attestations first", []v1.Descriptor{att("a1", unknown), att("a2", unknown), image(arm64, "arm64"), image(amd64, "amd64")}, Platform{"linux", "arm64", ""}, arm64, ""},
		{"annotated attestation claiming the platform", []v1.Descriptor{att("a1", &v1.Platform{OS: "linux", Architecture: "amd64"}), image(amd64, "amd64")}, Platform{"linux", "amd64", ""}, amd64, ""},
		{"unknown/unknown without annotation", []v1.Descriptor{{MediaType: v1.MediaTypeImageManifest, Digest: digest.FromString("u"), Size: 1, Platform: unknown}, image(arm64, "arm64")}, Platform{"linux", "arm64", ""}, arm64, ""},
		{"attestations alone", []v1.Descriptor{att("a1", unknown), att("a2", &v1.Platform{OS: "linux", Architecture: "amd64"})}, Platform{"linux", "amd64", ""}, "", "no manifest for linux/amd64 (has )"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top, err := json.Marshal(v1.Index{MediaType: v1.MediaTypeImageIndex, Manifests: tt.manifests})
			if err != nil {
				t.Fatal(err)
			}
			got, err := childFor(top, digest.FromBytes(top), tt.plat, "")
			if tt.wantErr != "" {
				if !errors.Is(err, ErrPlatform) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("childFor() = %s, %v; want ErrPlatform containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("childFor() = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}
