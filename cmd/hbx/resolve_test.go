package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
)

// TestResolve runs hbx resolve against the real registry: a tag prints
// its pinned form, the platform's manifest, the plan and the upgrade
// command line (exit 0; --json the same as one object); a digest the tag
// does not name is printed and exits 1; an unknown tag and an unreachable
// registry exit 1 with one line; a bad REF or --platform exits 2 with one
// line naming the rule; the command line for another platform than the
// box's says it is for a box of that platform.
func TestResolve(t *testing.T) {
	reg := testenv.StartRegistry(t)
	plat := "linux/" + runtime.GOARCH
	img, err := registrytest.NewImage(registrytest.PlatformImage{
		Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Layers:   [][]byte{tartest.New().Dir("app", 0o755).File("app/x", "x", 0o644).Bytes()},
		Config:   v1.ImageConfig{Cmd: []string{"/app/x"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := img.Push(ctx, reg.URL(), "hbx/resolve", "v1"); err != nil {
		t.Fatal(err)
	}
	name := reg.Host() + "/hbx/resolve"
	pinned, manifest := name+":v1@"+img.Index.String(), img.Manifests[plat].String()
	cfg := writeConfig(t, "executor:\n  runtime_dir: "+filepath.Join(t.TempDir(), "rt")+"\n  platform: "+plat+
		"\nregistry:\n  insecure_hosts: [127.0.0.1]\n  retries: 0\n")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()

	for _, tc := range []struct {
		name string
		args []string
		code int
		out  []string // in stdout
		err  string   // in the error
	}{
		{"tag", []string{name + ":v1"}, 0, []string{"image     " + pinned, "manifest  " + manifest + " (" + plat + ", from the index)",
			"would fetch 1 layer", "run       hbx upgrade --config " + cfg + " --image " + pinned + " --platform-digest " + manifest}, ""},
		{"the box's own platform", []string{name + ":v1", "--platform", plat}, 0, []string{"run       hbx upgrade --config " + cfg + " --image " + pinned}, ""},
		{"tag with its digest", []string{pinned}, 0, []string{"image     " + pinned}, ""},
		{"digest mismatch", []string{name + ":v1@sha256:" + strings.Repeat("a", 64)}, 1, []string{"MISMATCH", "image     " + pinned},
			"digest mismatch: " + name + ":v1 names " + img.Index.String() + " now, not the given sha256:" + strings.Repeat("a", 64)},
		{"unknown tag", []string{name + ":nope"}, 1, nil, "manifest unknown"},
		{"unreachable registry", []string{dead + "/x:v1"}, 1, nil, dead},
		{"no tag", []string{name}, 2, nil, `resolve: image reference "` + name + `" has no tag and no digest (want name:tag or name:tag@sha256:<64 hex>)`},
		{"bad platform", []string{name + ":v1", "--platform", "linux"}, 2, nil, `resolve: --platform: platform "linux" is not a platform`},
		{"other platform", []string{name + ":v1", "--platform", "linux/s390x"}, 1, nil, "no manifest for linux/s390x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, code, err := runTest(t, nil, append([]string{"resolve", "--config", cfg}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("hbx resolve %s = exit %d (%v), want %d\n%s", tc.args, code, err, tc.code, out)
			}
			for _, w := range tc.out {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n")) {
				t.Errorf("error = %v, want one line containing %q", err, tc.err)
			}
			if err != nil {
				t.Logf("%s: %v", tc.name, err)
			}
		})
	}

	// On a box of another platform, the command line is another box's.
	other := writeConfig(t, "executor:\n  runtime_dir: "+filepath.Join(t.TempDir(), "rt")+"\n  platform: linux/riscv64"+
		"\nregistry:\n  insecure_hosts: [127.0.0.1]\n  retries: 0\n")
	out, _, code, err := runTest(t, nil, "resolve", "--config", other, "--platform", plat, name+":v1")
	if want := "run       on a " + plat + " box (this one is linux/riscv64): hbx upgrade --config " + other + " --image " + pinned + " --platform-digest " + manifest + "\n"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("hbx resolve --platform %s on a linux/riscv64 box = exit %d (%v):\n%s\nwant the line %q", plat, code, err, out, want)
	}

	// The run line carries --config as the operator gave it, quoted for
	// the shell; a config named by $HBX_CONFIG the same shell finds again.
	odd := filepath.Join(t.TempDir(), "my hbx's", "hbx.yaml")
	if err := os.MkdirAll(filepath.Dir(odd), 0o755); err != nil {
		t.Fatal(err)
	}
	if body, err := os.ReadFile(cfg); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(odd, body, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--config", odd}, "run       hbx upgrade --config '" + strings.ReplaceAll(odd, "'", `'\''`) + "' --image " + pinned + " --platform-digest "},
		{[]string{"HBX_CONFIG=" + cfg}, nil, "run       hbx upgrade --image " + pinned + " --platform-digest "},
	} {
		out, _, code, err := runTest(t, tc.env, append(append([]string{"resolve"}, tc.args...), name+":v1")...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("hbx resolve %q (env %q) = exit %d (%v):\n%s\nwant the line %q", tc.args, tc.env, code, err, out, tc.want)
		}
	}

	out, _, code, err = runTest(t, nil, "resolve", "--config", cfg, "--json", name+":v1")
	var got struct {
		Image, Platform string
		Manifest        string `json:"manifest_digest"`
		Single          bool   `json:"single_manifest"`
		Fetch, Reuse    int
		Layers          []map[string]any
		FetchBytes      int64 `json:"fetch_bytes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Image != pinned || got.Manifest != manifest ||
		got.Single || got.Fetch != 1 || got.Reuse != 0 || len(got.Layers) != 1 || got.FetchBytes != img.Layers[plat][0].Size {
		t.Errorf("hbx resolve --json = exit %d (%v): %s\nparsed %+v", code, err, out, got)
	}
}
