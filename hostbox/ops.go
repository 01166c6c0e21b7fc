// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// Service is one container of a box as `docker compose ps` shows it.
type Service struct {
	Service string
	State   string // running, exited, created, ...
	Health  string // healthy, unhealthy, starting, or ""
	Status  string // Docker's words: "Up 3 minutes (healthy)"
}

// Services returns b's containers by service name.
func (d Docker) Services(ctx context.Context, b Box) (map[string]Service, error) {
	out, err := d.Compose(ctx, b, "ps", "-a", "--format", "json")
	if err != nil {
		return nil, err
	}
	return parsePS([]byte(out))
}

// parsePS reads `compose ps --format json`: one object per line (Compose
// 2.21 and later) or one array (earlier).
func parsePS(data []byte) (map[string]Service, error) {
	var list []Service
	data = bytes.TrimSpace(data)
	if bytes.HasPrefix(data, []byte("[")) {
		if err := json.Unmarshal(data, &list); err != nil {
			return nil, fmt.Errorf("read compose ps: %w", err)
		}
	} else {
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var s Service
			if err := json.Unmarshal(line, &s); err != nil {
				return nil, fmt.Errorf("read compose ps: %w", err)
			}
			list = append(list, s)
		}
	}
	m := map[string]Service{}
	for _, s := range list {
		m[s.Service] = s
	}
	return m, nil
}

// Status is one line of hbx box ls.
type Status struct {
	Box    Box
	State  string // running, stopped, partial, absent (no containers), "broken: " and why Open refused it, or the error
	Health string // the executor's health, or "-"
}

// Statuses returns the state of every box under root.
func (d Docker) Statuses(ctx context.Context, root string) ([]Status, error) {
	boxes, err := List(root)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(boxes))
	for _, b := range boxes {
		out = append(out, d.status(ctx, b))
	}
	return out, nil
}

func (d Docker) status(ctx context.Context, b Box) Status {
	st := Status{Box: b, Health: "-"}
	if b.Broken != "" {
		st.State = "broken: " + b.Broken
		return st
	}
	svcs, err := d.Services(ctx, b)
	if err != nil {
		st.State = "unknown: " + err.Error()
		return st
	}
	running := 0
	for _, s := range svcs {
		if s.State == "running" {
			running++
		}
	}
	switch {
	case len(svcs) == 0:
		st.State = "absent"
	case running == 0:
		st.State = "stopped"
	case running == len(svcs) && len(svcs) == 2:
		st.State = "running"
	default:
		st.State = "partial"
	}
	if e, ok := svcs["executor"]; ok && e.State == "running" && e.Health != "" {
		st.Health = e.Health
	}
	return st
}

// Stop stops both containers (Compose's stop_grace_period applies) and
// returns how long it took.
func (d Docker) Stop(ctx context.Context, root, name string) (time.Duration, error) {
	return d.locked(ctx, root, name, "hbx box stop", func(b Box) error {
		_, err := d.Compose(ctx, b, "stop")
		return err
	})
}

// Start starts the box's containers (created when missing: `up -d
// --wait`, which keeps the port and volumes) and waits for health, at
// most wait.
func (d Docker) Start(ctx context.Context, root, name string, wait time.Duration) (time.Duration, error) {
	if wait <= 0 {
		wait = 5 * time.Minute
	}
	return d.locked(ctx, root, name, "hbx box start", func(b Box) error {
		_, err := d.upWait(ctx, b, wait)
		return err
	})
}

// Remove deletes the box: its containers, networks and volumes (`down
// -v`), then its directory. The caller has the name confirmed first.
func (d Docker) Remove(ctx context.Context, root, name string) (time.Duration, error) {
	return d.locked(ctx, root, name, "hbx box rm", func(b Box) error {
		if _, err := d.Compose(ctx, b, "down", "-v", "--remove-orphans"); err != nil {
			return err
		}
		if err := os.RemoveAll(b.Dir); err != nil {
			return fmt.Errorf("remove box %s: %w", name, err)
		}
		return nil
	})
}

// locked opens the box, holds its lock while fn runs, and times fn.
func (d Docker) locked(ctx context.Context, root, name, command string, fn func(Box) error) (time.Duration, error) {
	b, err := Open(root, name)
	if err != nil {
		return 0, err
	}
	l, err := lockBox(ctx, b, command)
	if err != nil {
		return 0, err
	}
	defer l.Unlock()
	start := time.Now()
	if err := fn(b); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// Logs passes `docker compose logs ARGS` through (no lock: it only reads).
func (d Docker) Logs(ctx context.Context, root, name string, s Streams, args []string) error {
	b, err := Open(root, name)
	if err != nil {
		return err
	}
	return d.Attach(ctx, b, s, append([]string{"logs"}, args...)...)
}

// Enter runs argv in the agent (default: bash, else sh, as a login
// shell) on the caller's streams; tty allocates a terminal.
func (d Docker) Enter(ctx context.Context, root, name string, s Streams, tty bool, argv []string) error {
	b, err := Open(root, name)
	if err != nil {
		return err
	}
	if len(argv) == 0 {
		argv = []string{"sh", "-c", "command -v bash >/dev/null && exec bash -l; exec sh -l"}
	}
	args := []string{"exec"}
	if !tty {
		args = append(args, "-T")
	}
	return d.Attach(ctx, b, s, append(append(args, "agent"), argv...)...)
}

// ReadKey returns the box's MCP key (the first line of mcp.key).
func ReadKey(b Box) (string, error) {
	data, err := os.ReadFile(b.Path(KeyFile))
	if err != nil {
		return "", fmt.Errorf("read the key of box %s: %w", b.Name, err)
	}
	k, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimSpace(k), nil
}
