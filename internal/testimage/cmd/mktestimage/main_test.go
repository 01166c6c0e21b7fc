// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/testimage"
)

func TestRunPush(t *testing.T) {
	if _, err := testimage.BunTarballs(testenv.RepoRoot(t)); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	reg := testenv.StartRegistry(t)
	ref := reg.Host() + "/executor-selfhost:cli"
	var stdout, stderr bytes.Buffer
	args := []string{"-out", t.TempDir(), "-version", "2.0.0", "-platforms", "linux/arm64", "-push", ref}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run(%q) = %v; stderr:\n%s", args, err, &stderr)
	}
	kv := map[string]string{}
	for line := range strings.Lines(stdout.String()) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			t.Errorf("output line %q is not key=value", line)
		}
		kv[k] = v
	}
	if kv["index"] == "" || kv["linux/arm64"] == "" || kv["linux/amd64"] != "" || kv["ref"] != ref+"@"+kv["index"] {
		t.Errorf("run(%q) printed:\n%s", args, &stdout)
	}
}

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-push", "a/b:c", "-registry", t.TempDir()},
		{"stray"},
		{"-nope"},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, &stdout, &stderr); err == nil {
			t.Errorf("run(%q) = nil error, want one", args)
		}
	}
}
