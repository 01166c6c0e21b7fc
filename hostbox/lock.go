// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"context"
	"fmt"

	"github.com/hermesbox/hbx/internal/lock"
)

// lockBox takes b's .lock without waiting: a second operation on the box
// is refused, naming the holder (lock.HeldError, lock.IsLocked).
func lockBox(ctx context.Context, b Box, command string) (*lock.Lock, error) {
	l, err := lock.Acquire(ctx, b.Path(LockFile), command, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("box %s is busy: %w", b.Name, err)
	}
	return l, nil
}
