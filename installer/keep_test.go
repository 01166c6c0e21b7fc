package installer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// TestInstallCleanupKeepsAndRefuses proves the two caller rules an
// install runs under its lock: Options.Keep keeps a release its cleanup
// would remove (neither current nor previous: what an unfinished upgrade
// still names), and Options.Refuse's error ends the install before
// anything changes (current, previous and releases/ as they were).
// Before, the cleanup removed every release but current and previous.
func TestInstallCleanupKeepsAndRefuses(t *testing.T) {
	versions := []string{"VERSION=1", "VERSION=2", "VERSION=3"}
	for _, tc := range []struct {
		name       string
		keepFirst  bool
		refuse     error
		wantRels   int
		wantActive int // the version index active afterwards
	}{
		{name: "no keep: first removed", wantRels: 2, wantActive: 2},
		{name: "keep names the first", keepFirst: true, wantRels: 3, wantActive: 2},
		{name: "refused under the lock", refuse: errors.New("an upgrade is half done"), wantRels: 2, wantActive: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var manifests []digest.Digest
			var opts []Options
			for _, v := range versions {
				parts := goodParts(hostPlat)
				parts.config.Env = append(parts.config.Env, v)
				p := e.reg.publish(t, "executor", parts)
				manifests = append(manifests, p.manifests["linux/"+hostPlat.Architecture])
				opts = append(opts, e.opts(p))
			}
			for _, o := range opts[:2] {
				if _, err := Install(context.Background(), o); err != nil {
					t.Fatal(err)
				}
			}
			last := opts[2]
			if tc.keepFirst {
				last.Keep = func(m release.Meta) bool { return m.ManifestDigest == manifests[0] }
			}
			if tc.refuse != nil {
				last.Refuse = func() error { return tc.refuse }
			}
			_, err := Install(context.Background(), last)
			if !errors.Is(err, tc.refuse) || tc.refuse == nil && err != nil {
				t.Fatalf("Install(v3) = %v, want %v", err, tc.refuse)
			}
			ents, _ := os.ReadDir(filepath.Join(e.runtime, release.ReleasesDir))
			if len(ents) != tc.wantRels {
				t.Errorf("releases/ holds %d entries, want %d", len(ents), tc.wantRels)
			}
			if _, err := os.Stat(filepath.Join(e.runtime, release.ReleasesDir, manifests[0].Encoded())); (err == nil) != (tc.keepFirst || tc.refuse != nil) {
				t.Errorf("the first release exists: %v; want %v", err == nil, tc.keepFirst || tc.refuse != nil)
			}
			if cur, err := release.Current(e.runtime); err != nil || cur.Meta.ManifestDigest != manifests[tc.wantActive] {
				t.Errorf("current = %v, %v; want version %d", cur, err, tc.wantActive+1)
			}
		})
	}
}
