package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
)

// TestRegistryMirrorsE2E (issue 23): registry.mirrors gives the image's
// repository other locations, tried in order before its own name, on two
// real registries; the pinned digest decides. A mirror that lacks the
// image, or whose registry is down, is passed over for the image's own
// name; an image that moved (only at its new home, its old registry down)
// is fetched from the mirror; a mirror serving other bytes for the pinned
// digest is passed over too. hbx install's result, text and --json,
// names the location that answered.
func TestRegistryMirrorsE2E(t *testing.T) {
	requireE2E(t)
	home, img, ref := pushed(t) // the old name: <home>/rhyssullivan/executor-selfhost
	other := testenv.StartRegistry(t)
	down := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	oldName := strings.SplitN(ref, ":v", 2)[0]
	digest := ref[strings.LastIndex(ref, "@")+1:]
	newName := other.Host() + "/usefulsoftwareco/executor-selfhost"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := testimage.Push(ctx, img.Dir, newName+":v1.5.12"); err != nil {
		t.Fatalf("push to the new home: %v", err)
	}
	movedName := down + "/rhyssullivan/executor-selfhost"
	tests := []struct {
		name    string
		image   string
		mirrors []string
		want    string // the location that answers
		warned  bool   // a location before it was passed over
	}{
		{"mirror lacks the image", ref, []string{oldName + "=" + home.Host() + "/nobody/executor-selfhost", oldName + "=" + newName}, newName, true},
		{"mirror down", ref, []string{oldName + "=" + down + "/usefulsoftwareco/executor-selfhost"}, oldName, true},
		{"moved: old registry down", movedName + ":v1.5.12@" + digest, []string{down + "/rhyssullivan=" + other.Host() + "/usefulsoftwareco"}, newName, false},
		{"no mirror", ref, nil, oldName, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q []string
			for _, m := range tt.mirrors {
				q = append(q, fmt.Sprintf("%q", m))
			}
			b := newBox(t, home, tt.image, nil, "")
			cfg := strings.Replace(readFile(t, b.config), fmt.Sprintf("insecure_hosts: [%q]", home.Host()),
				fmt.Sprintf("insecure_hosts: [%q, %q, %q]\n  mirrors: [%s]", home.Host(), other.Host(), down, strings.Join(q, ", ")), 1)
			writeFile(t, b.config, cfg, 0o600)
			r := b.hbx("install", "--json")
			if r.code != 0 {
				t.Fatalf("hbx install = %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			var res struct {
				Event    string `json:"event"`
				Changed  bool   `json:"changed"`
				Location string `json:"location"`
			}
			if err := json.Unmarshal([]byte(lastLine(r.stdout)), &res); err != nil || !res.Changed || res.Location != tt.want {
				t.Errorf("hbx install --json result = %+v, %v; want changed from location %s\n%s", res, err, tt.want, r.stdout)
			}
			if warned := strings.Contains(r.stderr, "image location did not answer"); warned != tt.warned {
				t.Errorf("hbx install warned of a location passed over: %v, want %v\n%s", warned, tt.warned, r.stderr)
			}
			// The text result names it too (a cold install again).
			b2 := newBox(t, home, tt.image, nil, "")
			writeFile(t, b2.config, strings.Replace(cfg, b.dir, b2.dir, -1), 0o600)
			if r := b2.hbx("install"); r.code != 0 || !strings.Contains(r.stdout, "fetched from "+tt.want+" ") {
				t.Errorf("hbx install = %d, want a result naming %s:\n%s%s", r.code, tt.want, r.stdout, r.stderr)
			}
		})
	}
	// A mirror that lies (other bytes for the pinned index digest) is
	// passed over: the digest decides, not the location.
	liar := registrytest.NewProxy(t, other.URL())
	liar.Add(registrytest.Rule{Kind: registrytest.Manifest, Path: digest, Fault: registrytest.Edit(func(b []byte) []byte { return append(b, ' ') })})
	lb := newBox(t, home, ref, nil, "")
	writeFile(t, lb.config, strings.Replace(readFile(t, lb.config), fmt.Sprintf("insecure_hosts: [%q]", home.Host()),
		fmt.Sprintf("insecure_hosts: [%q, %q]\n  mirrors: [%q]", home.Host(), liar.Host(), oldName+"="+liar.Host()+"/usefulsoftwareco/executor-selfhost"), 1), 0o600)
	if r := lb.hbx("install"); r.code != 0 || !strings.Contains(r.stdout, "fetched from "+oldName+" ") || !strings.Contains(r.stderr, "digest mismatch") {
		t.Errorf("hbx install with a lying mirror = %d, want the image's own location after a digest mismatch:\n%s%s", r.code, r.stdout, r.stderr)
	}

	// None answers: the error names the last location's failure and the
	// others tried.
	b := newBox(t, home, movedName+":v1.5.12@"+digest, nil, "")
	cfg := strings.Replace(readFile(t, b.config), fmt.Sprintf("insecure_hosts: [%q]", home.Host()),
		fmt.Sprintf("insecure_hosts: [%q, %q]\n  mirrors: [%q]", other.Host(), down, down+"/rhyssullivan="+other.Host()+"/nobody"), 1)
	writeFile(t, b.config, cfg, 0o600)
	r := b.hbx("install")
	if last := lastLine(r.stderr); r.code != 1 || !strings.Contains(last, "tried before: "+other.Host()+"/nobody/executor-selfhost: ") {
		t.Errorf("hbx install with no location answering = %d, want 1 naming the locations tried:\n%s", r.code, r.stderr)
	}
}
