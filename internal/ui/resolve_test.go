package ui

import (
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/release"
)

// TestResolveText: an index names its child manifest, a single manifest
// says it is both pins, a given digest the tag does not name is
// flagged, the plan counts fetch and reuse, and the command line of
// another platform than the box's says which box it is for.
func TestResolveText(t *testing.T) {
	d := func(s string) digest.Digest { return digest.FromString(s) }
	ref := release.ImageRef{Name: "ghcr.io/o/x", Tag: "v2"}
	layers := []installer.PlannedLayer{{Digest: d("l1"), Size: 3 << 20, Reusable: true}, {Digest: d("l2"), Size: 1 << 20}}
	for _, tc := range []struct {
		name string
		r    installer.Resolution
		box  string
		want []string
		not  []string
	}{
		{"index", installer.Resolution{Ref: ref, Index: d("i"), Manifest: d("m"), Platform: "linux/arm64", Layers: layers}, "",
			[]string{"image     ghcr.io/o/x:v2@" + d("i").String() + "\n", "manifest  " + d("m").String() + " (linux/arm64, from the index)\n",
				"would fetch 1 layer (1.0 MiB) and reuse 1 layer (3.0 MiB)", "  reuse  " + d("l1").String(), "  fetch  " + d("l2").String(),
				"run       hbx upgrade --image ghcr.io/o/x:v2@" + d("i").String() + " --platform-digest " + d("m").String() + "\n"},
			[]string{"MISMATCH", "single"}},
		{"single, moved", installer.Resolution{Ref: release.ImageRef{Name: "ghcr.io/o/x", Tag: "v2", Digest: d("old")}, Index: d("m"), Manifest: d("m"), Single: true, Platform: "linux/amd64"}, "",
			[]string{"the tag names a single manifest, not an index", "MISMATCH  the given digest " + d("old").String(), "would fetch 0 layers (0 B) and reuse 0 layers (0 B)",
				"run       only if you want what the tag names now, not the digest you gave: hbx upgrade --image ghcr.io/o/x:v2@" + d("m").String()},
			[]string{"run       hbx upgrade"}},
		{"another box's platform", installer.Resolution{Ref: ref, Index: d("i"), Manifest: d("m"), Platform: "linux/arm64", Layers: layers}, "linux/amd64",
			[]string{"run       on a linux/arm64 box (this one is linux/amd64): hbx upgrade --image ghcr.io/o/x:v2@" + d("i").String() + " --platform-digest " + d("m").String() + "\n"},
			[]string{"run       hbx upgrade"}},
		{"config named", installer.Resolution{Ref: ref, Index: d("i"), Manifest: d("m"), Platform: "linux/arm64"}, "",
			[]string{"run       hbx upgrade --config '/etc/my hbx/it'\\''s.yaml' --image ghcr.io/o/x:v2@" + d("i").String() + " --platform-digest "},
			nil},
	} {
		cfg := ""
		if tc.name == "config named" {
			cfg = "/etc/my hbx/it's.yaml"
		}
		got := ResolveText(&tc.r, tc.box, cfg)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: ResolveText() lacks %q:\n%s", tc.name, w, got)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: ResolveText() has %q:\n%s", tc.name, w, got)
			}
		}
	}
}

// TestShellQuote: a word of plain characters stays as it is; anything a
// shell reads specially (space, quote, $, glob, empty) is single-quoted,
// a single quote inside escaped between two quoted parts.
func TestShellQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/etc/hbx/hbx.yaml", "/etc/hbx/hbx.yaml"},
		{"a-b_c.d:e@f%g+h=i,j", "a-b_c.d:e@f%g+h=i,j"},
		{"", "''"},
		{"/my dir/x", "'/my dir/x'"},
		{"it's", `'it'\''s'`},
		{"$HOME/*.yaml", "'$HOME/*.yaml'"},
		{"a;rm -rf b", "'a;rm -rf b'"},
		{"~/x", "'~/x'"},
	} {
		if got := ShellQuote(tc.in); got != tc.want {
			t.Errorf("ShellQuote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
