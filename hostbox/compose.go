// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Docker runs the docker CLI for boxes: Program (default "docker") with
// Environ as the base environment (os.Environ() in the command; DOCKER_HOST
// and DOCKER_CONFIG pass through).
type Docker struct {
	Program string
	Environ []string
}

// env is d.Environ without the box's .env variables and COMPOSE_*, so the
// box's .env decides what Compose interpolates.
func (d Docker) env(b Box) []string {
	var out []string
	for _, kv := range d.Environ {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "COMPOSE_") || b.Env.Get(k) != "" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Streams are the standard streams a pass-through command gets.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// command builds `docker compose ARGS` run in b's directory.
func (d Docker) command(ctx context.Context, b Box, args ...string) *exec.Cmd {
	prog := d.Program
	if prog == "" {
		prog = "docker"
	}
	cmd := exec.CommandContext(ctx, prog, append([]string{"compose"}, args...)...)
	cmd.Dir = b.Dir
	cmd.Env = d.env(b)
	// On a deadline or an interrupt, SIGINT first: the docker CLI passes
	// it to the Compose plugin, which then stops what it started.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	return cmd
}

// Compose runs `docker compose ARGS` in b's directory and returns its
// stdout. An error names the command and ends with the last line Compose
// wrote to stderr.
func (d Docker) Compose(ctx context.Context, b Box, args ...string) (string, error) {
	cmd := d.command(ctx, b, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker compose %s: %w%s", strings.Join(args, " "), err, lastLine(errb.String()))
	}
	return out.String(), nil
}

// Attach runs `docker compose ARGS` in b's directory on the caller's
// streams (logs, exec).
func (d Docker) Attach(ctx context.Context, b Box, s Streams, args ...string) error {
	cmd := d.command(ctx, b, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.In, s.Out, s.Err
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker compose %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// dockerCmd builds `docker ARGS`.
func (d Docker) dockerCmd(ctx context.Context, args ...string) *exec.Cmd {
	prog := d.Program
	if prog == "" {
		prog = "docker"
	}
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = d.Environ
	return cmd
}

// Run runs docker ARGS (not compose) and returns its stdout.
func (d Docker) Run(ctx context.Context, args ...string) (string, error) {
	cmd := d.dockerCmd(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w%s", strings.Join(args, " "), err, lastLine(errb.String()))
	}
	return out.String(), nil
}

// lastLine is ": <the last non-empty line of s>", or "".
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return ": " + l
	}
	return ""
}
