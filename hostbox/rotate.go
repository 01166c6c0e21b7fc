// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hermesbox/hbx/internal/atomicfile"
)

// RotateResult is what RotateToken saw.
type RotateResult struct {
	Took             time.Duration
	OldCode, NewCode int // POST /mcp from the host with the old and the new key
}

// RotateToken mints a new key into mcp.key, recreates both containers
// (the secret is a bind mount of that file: a container sees a replaced
// file only when recreated), waits for health, and checks from the host
// that the old key is refused (401) and the new one taken (200). When
// the recreate fails, the old key is put back and the error returned;
// the box is then as `hbx box start` leaves it.
func (d Docker) RotateToken(ctx context.Context, root, name string, wait time.Duration) (RotateResult, error) {
	var res RotateResult
	if wait <= 0 {
		wait = 5 * time.Minute
	}
	took, err := d.locked(ctx, root, name, "hbx box rotate-token", func(b Box) error {
		old, err := ReadKey(b)
		if err != nil {
			return err
		}
		key, err := mintSecret()
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(b.Path(KeyFile), []byte(key+"\n"), 0o600); err != nil {
			return fmt.Errorf("rotate the key of box %s: %w", name, err)
		}
		if _, err := d.upWait(ctx, b, wait, "--force-recreate"); err != nil {
			_ = atomicfile.WriteFile(b.Path(KeyFile), []byte(old+"\n"), 0o600)
			return fmt.Errorf("rotate the key of box %s (the old key is back in %s; hbx box start %s): %w", name, KeyFile, name, err)
		}
		return d.checkRotated(ctx, b, old, key, &res)
	})
	res.Took = took
	return res, err
}

// checkRotated wants 401 for the old key and 200 for the new one.
func (d Docker) checkRotated(ctx context.Context, b Box, old, key string, res *RotateResult) error {
	var err error
	u := b.URL() + "mcp"
	if res.OldCode, _, err = hostRequest(ctx, http.MethodPost, u, old, initialize); err != nil {
		return err
	}
	if res.NewCode, _, err = hostRequest(ctx, http.MethodPost, u, key, initialize); err != nil {
		return err
	}
	if res.OldCode != http.StatusUnauthorized || res.NewCode != http.StatusOK {
		return fmt.Errorf("rotate the key of box %s: POST %s answers %d to the old key and %d to the new one, want 401 and 200 (does the payload take its key from executor.token_file?)", b.Name, u, res.OldCode, res.NewCode)
	}
	return nil
}
