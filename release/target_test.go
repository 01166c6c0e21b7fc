package release

import (
	"encoding/json"
	"errors"
	"testing"

	digest "github.com/opencontainers/go-digest"
)

// TestTargetCheck pins the one comparison of releases against the inline
// copies it replaced (cmd/hbx's rollback match, backup's recorded digests,
// restore's planPin and ensureRuntime), over every combination of equal,
// different and missing index, platform and manifest.
func TestTargetCheck(t *testing.T) {
	idx := []digest.Digest{digest.FromString("i1"), digest.FromString("i2")}
	plats := []string{"linux/arm64", "linux/amd64"}
	mans := []digest.Digest{"", digest.FromString("m1"), digest.FromString("m2")}
	for _, wi := range idx {
		for _, hi := range idx {
			for _, wp := range plats {
				for _, hp := range plats {
					for _, wm := range mans {
						for _, hm := range mans {
							want := Target{IndexDigest: wi, Platform: wp, ManifestDigest: wm}
							have := Target{IndexDigest: hi, Platform: hp, ManifestDigest: hm}
							// Meta.Matches: have is a release.json, whose manifest is always set.
							if hm != "" {
								old := hi == wi && hp == wp && (wm == "" || hm == wm)
								err := Meta{IndexDigest: hi, Platform: hp, ManifestDigest: hm}.Matches(wi, wp, wm)
								if (err == nil) != old || err != nil && !errors.Is(err, ErrMismatch) {
									t.Errorf("Matches(%v) of %v = %v, want match %v", want, have, err, old)
								}
							}
							// restore's planPin: configured want, archive have.
							old := wi == hi && (wm == "" || hm == "" || hp != wp || wm == hm)
							if got := want.On(hp).Check(have) == nil; got != old {
								t.Errorf("%v.On(%s).Check(%v) = %v, want %v", want, hp, have, got, old)
							}
							// restore's ensureRuntime: archive want, installed have.
							if hm != "" {
								old := hi == wi && (wm == "" || hp != wp || hm == wm)
								if got := want.On(hp).Check(have) == nil; got != old {
									t.Errorf("archive %v.On(%s).Check(%v) = %v, want %v", want, hp, have, got, old)
								}
							}
						}
					}
				}
			}
		}
	}
}

func TestTargetCheckSays(t *testing.T) {
	a, b := digest.FromString("a"), digest.FromString("b")
	want := Target{IndexDigest: a, Platform: "linux/arm64", ManifestDigest: a}
	for have, msg := range map[Target]string{
		{IndexDigest: b, Platform: "linux/arm64", ManifestDigest: a}: "release does not match the configuration: installed index " + b.String() + ", configured " + a.String(),
		{IndexDigest: a, Platform: "linux/amd64", ManifestDigest: a}: "release does not match the configuration: installed platform linux/amd64, configured linux/arm64",
		{IndexDigest: a, Platform: "linux/arm64", ManifestDigest: b}: "release does not match the configuration: installed manifest " + b.String() + ", pinned " + a.String(),
	} {
		if err := want.Check(have); err == nil || err.Error() != msg {
			t.Errorf("Check(%v) = %v, want %s", have, err, msg)
		}
	}
	m := Meta{Image: "x:1@" + a.String(), IndexDigest: a, Platform: "linux/arm64", ManifestDigest: b}
	if got := m.Target(); got != (Target{Image: m.Image, IndexDigest: a, Platform: "linux/arm64", ManifestDigest: b}) {
		t.Errorf("Target() = %+v", got)
	}
}

// TestTargetEqualAndString: two targets name the same release when their
// index and manifest digests agree, whatever the image's spelling;
// String names it for people; the JSON field names are the ones upgrade's
// journal and a restore's journal have always written.
func TestTargetEqualAndString(t *testing.T) {
	a := Target{Image: "r/e:v1@sha256:aa", IndexDigest: "sha256:aa", Platform: "linux/amd64", ManifestDigest: "sha256:11"}
	for _, tc := range []struct {
		name string
		b    Target
		want bool
	}{
		{"itself", a, true},
		{"another spelling of the image", Target{Image: "registry/r/e@sha256:aa", IndexDigest: "sha256:aa", Platform: "linux/amd64", ManifestDigest: "sha256:11"}, true},
		{"another index", Target{Image: a.Image, IndexDigest: "sha256:bb", Platform: a.Platform, ManifestDigest: a.ManifestDigest}, false},
		{"another manifest", Target{Image: a.Image, IndexDigest: a.IndexDigest, Platform: a.Platform, ManifestDigest: "sha256:22"}, false},
		{"no manifest", Target{Image: a.Image, IndexDigest: a.IndexDigest, Platform: a.Platform}, false},
	} {
		if got := a.Equal(tc.b); got != tc.want {
			t.Errorf("%s: Equal(%v) = %v, want %v", tc.name, tc.b, got, tc.want)
		}
		if got := tc.b.Equal(a); got != tc.want {
			t.Errorf("%s: reversed Equal = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got, want := a.String(), "r/e:v1@sha256:aa (linux/amd64 manifest sha256:11)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"image":"r/e:v1@sha256:aa","index_digest":"sha256:aa","platform":"linux/amd64","manifest_digest":"sha256:11"}`; got != want {
		t.Errorf("json.Marshal(Target) = %s, want %s", got, want)
	}
}
