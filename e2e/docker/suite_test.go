// SPDX-License-Identifier: Apache-2.0

// Package docker runs the Docker-host box (deploy/Dockerfile,
// deploy/compose.yaml) on a real Docker Engine: the dockerd that
// scripts/dockerdeps.sh starts, Compose v2, the real hbx and Bun, and the
// real registry as a TLS container with a CA the suite generates. It runs
// under `make e2e-docker` (HBXTEST_E2E=1 and the environment dockerdeps.sh
// prints); elsewhere it skips, and under HBXTEST_E2E=1 or CI=true a missing
// prerequisite fails instead.
//
// The suite builds, once per run: the test image (linux/amd64 only) in two
// versions pushed into a registry storage directory by the host's
// docker-registry, then served by a registry container on a network of its
// own that only the boxes' executors join (alias registry.hbx.test:5000,
// TLS, the suite's CA handed to hbx through registry.certs_dir); the
// executor image from deploy/Dockerfile and an agent image, both FROM the
// local base image (HBXTEST_DOCKER_BASE). Every Docker object it creates is
// named hbxt-<run id>..., and removed at the end.
package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
)

// registryHost is the registry's name on its network, in the image refs.
const registryHost = "registry.hbx.test:5000"

// suite is what every test of the package shares.
type suite struct {
	root     string
	id       string // run id: names of containers, networks, images
	env      []string
	base     string
	execImg  string // executor image tag
	agentImg string
	regImg   string
	regNet   string // the registry's network
	regName  string // the registry container
	caPEM    []byte
	refV1    string // registry.hbx.test:5000/executor-selfhost:v1@sha256:...
	refV2    string
	pinV1    string // linux/amd64 manifest digests
	pinV2    string
	refTree  string // testimage.ShapeTree, today's Executor (a process tree)
	pinTree  string
	imgSize  int64
}

var (
	suiteOnce sync.Once
	theSuite  *suite
	suiteErr  error
	cleanups  []func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.Exit(code)
}

// requireDocker skips unless the e2e run was asked for, reports missing
// prerequisites with testenv.Missing, and returns the shared suite.
func requireDocker(t *testing.T) *suite {
	t.Helper()
	if os.Getenv("HBXTEST_E2E") != "1" && os.Getenv("CI") != "true" {
		// Not a missing prerequisite: the gate of the end-to-end tests.
		t.Skip("end-to-end test: run `make e2e-docker` (HBXTEST_E2E=1)")
	}
	const remedy = "(as root run scripts/dockerdeps.sh and export the DOCKER_HOST, DOCKER_CONFIG and HBXTEST_DOCKER_BASE it prints, or use make e2e-docker)"
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Missing(t, "the docker CLI is not installed "+remedy)
	}
	for _, v := range []string{"DOCKER_HOST", "DOCKER_CONFIG", "HBXTEST_DOCKER_BASE", "HBXTEST_BIN"} {
		if os.Getenv(v) == "" {
			testenv.Missing(t, v+" is not set "+remedy)
		}
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.APIVersion}}").CombinedOutput(); err != nil {
		testenv.Missing(t, fmt.Sprintf("no Docker Engine answers on %s: %s %s", os.Getenv("DOCKER_HOST"), strings.TrimSpace(string(out)), remedy))
	}
	if out, err := exec.Command("docker", "compose", "version").CombinedOutput(); err != nil {
		testenv.Missing(t, fmt.Sprintf("docker compose does not run: %s %s", strings.TrimSpace(string(out)), remedy))
	}
	if out, err := exec.Command("docker", "image", "inspect", os.Getenv("HBXTEST_DOCKER_BASE")).CombinedOutput(); err != nil {
		testenv.Missing(t, fmt.Sprintf("base image %s: %s %s", os.Getenv("HBXTEST_DOCKER_BASE"), strings.TrimSpace(string(out)), remedy))
	}
	suiteOnce.Do(func() { theSuite, suiteErr = newSuite(t) })
	if suiteErr != nil {
		t.Fatalf("set up the docker suite: %v", suiteErr)
	}
	return theSuite
}

// run runs docker with args and returns its stdout; stderr joins the error.
func run(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "DOCKER_BUILDKIT=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s%s", strings.Join(args, " "), err, errb.String(), tail(out.String()))
	}
	return out.String(), nil
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

func newSuite(t *testing.T) (*suite, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := &suite{root: testenv.RepoRoot(t), base: os.Getenv("HBXTEST_DOCKER_BASE")}
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	s.id = "hbxt" + hex.EncodeToString(b)
	s.execImg = s.id + "-executor:test"
	s.agentImg = s.id + "-agent:test"
	s.regImg = s.id + "-registry:test"
	s.regNet = s.id + "-registry"
	s.regName = s.id + "-registry"
	work, err := os.MkdirTemp("", s.id+"-")
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { os.RemoveAll(work) })
	cleanups = append(cleanups, func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		run(c, "", nil, "rm", "-f", "-v", s.regName)
		run(c, "", nil, "network", "rm", s.regNet)
		run(c, "", nil, "image", "rm", "-f", s.execImg, s.agentImg, s.regImg)
	})

	// The executor image, from the repository root (.dockerignore keeps
	// the context to bin/hbx and deploy/). bin/hbx is the binary under
	// test.
	if err := sameFile(os.Getenv("HBXTEST_BIN"), filepath.Join(s.root, "bin/hbx")); err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err := run(ctx, s.root, nil, "build", "-q", "--network", "none", "--build-arg", "BASE="+s.base, "-f", "deploy/Dockerfile", "-t", s.execImg, "."); err != nil {
		return nil, err
	}
	t.Logf("built %s in %v", s.execImg, time.Since(start).Round(time.Millisecond))
	out, err := run(ctx, "", nil, "image", "inspect", "--format", "{{.Size}}", s.execImg)
	if err != nil {
		return nil, err
	}
	fmt.Sscan(out, &s.imgSize)

	// The agent and registry images: the base plus one static program.
	probe := filepath.Join(work, "agent", "agentprobe")
	build := exec.CommandContext(ctx, "go", "build", "-o", probe, "./e2e/docker/agentprobe")
	build.Dir = s.root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build agentprobe: %w: %s", err, out)
	}
	if err := writeFile(filepath.Join(work, "agent", "Dockerfile"), fmt.Sprintf(
		"FROM %s\nCOPY agentprobe /usr/local/bin/agentprobe\nENTRYPOINT [\"/usr/local/bin/agentprobe\", \"sleep\"]\n", s.base)); err != nil {
		return nil, err
	}
	if _, err := run(ctx, filepath.Join(work, "agent"), nil, "build", "-q", "--network", "none", "-t", s.agentImg, "."); err != nil {
		return nil, err
	}
	if err := s.buildRegistry(ctx, t, work); err != nil {
		return nil, err
	}
	return s, nil
}

// buildRegistry pushes both test image versions with the host's registry
// into work/registry/storage, then serves that storage from a TLS registry
// container on the network s.regNet under the alias registry.hbx.test.
func (s *suite) buildRegistry(ctx context.Context, t *testing.T, work string) error {
	dir := filepath.Join(work, "registry")
	if err := os.MkdirAll(filepath.Join(dir, "image"), 0o755); err != nil {
		return err
	}
	tarballs, err := testimage.BunTarballs(s.root)
	if err != nil {
		return err
	}
	reg, err := testenv.Start(filepath.Join(dir, "host"))
	if err != nil {
		return err
	}
	for i, v := range []string{"docker-v1", "docker-v2", "docker-tree"} {
		shape := testimage.ShapeDebian
		if v == "docker-tree" {
			shape = testimage.ShapeTree
		}
		img, err := testimage.BuildLayout(filepath.Join(dir, "layout-"+v), testimage.Options{BunTarballs: tarballs, Version: v, Platforms: []string{"linux/amd64"}, Shape: shape})
		if err != nil {
			reg.Stop()
			return err
		}
		if _, err := testimage.Push(ctx, img.Dir, reg.Host()+"/executor-selfhost:"+v); err != nil {
			reg.Stop()
			return err
		}
		ref := fmt.Sprintf("%s/executor-selfhost:%s@%s", registryHost, v, img.IndexDigest)
		pin := img.Manifests["linux/amd64"].String()
		switch i {
		case 0:
			s.refV1, s.pinV1 = ref, pin
		case 1:
			s.refV2, s.pinV2 = ref, pin
		default:
			s.refTree, s.pinTree = ref, pin
		}
	}
	if err := reg.Stop(); err != nil {
		return err
	}

	img := filepath.Join(dir, "image")
	caPEM, err := testenv.TLSRegistryContext(img, "registry.hbx.test", s.base)
	if err != nil {
		return err
	}
	s.caPEM = caPEM
	if _, err := run(ctx, img, nil, "build", "-q", "--network", "none", "-t", s.regImg, "."); err != nil {
		return err
	}
	if _, err := run(ctx, "", nil, "network", "create", s.regNet); err != nil {
		return err
	}
	storage := filepath.Join(dir, "host", "storage")
	if _, err := run(ctx, "", nil, "run", "-d", "--name", s.regName, "--network", s.regNet, "--network-alias", "registry.hbx.test",
		"-v", storage+":/var/lib/registry", s.regImg); err != nil {
		return err
	}
	t.Logf("registry %s serves %s and %s over TLS on network %s", s.regName, s.refV1, s.refV2, s.regNet)
	return nil
}

func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o644)
}

// sameFile fails unless a and b are the same file: the executor image is
// built from bin/hbx, so HBXTEST_BIN must be that binary.
func sameFile(a, b string) error {
	fa, err := os.Stat(a)
	if err != nil {
		return fmt.Errorf("HBXTEST_BIN: %w", err)
	}
	fb, err := os.Stat(b)
	if err != nil {
		return fmt.Errorf("the executor image is built from bin/hbx (make build): %w", err)
	}
	if !os.SameFile(fa, fb) {
		return fmt.Errorf("HBXTEST_BIN %s is not %s, which the executor image is built from", a, b)
	}
	return nil
}
