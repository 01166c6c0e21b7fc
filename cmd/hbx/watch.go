package main

import (
	"context"
	"io"

	"github.com/hermesbox/hbx/internal/supervisorwatch"
	"github.com/hermesbox/hbx/supervisor"
)

// watchSupervisor opens a supervisorwatch.Watch on c: a followed,
// discarded log stream of program, which the supervisor ends only when it
// exits or the watch closes it. When program is "" the watch never
// reports the supervisor gone.
func watchSupervisor(c *supervisor.Client, program string) *supervisorwatch.Watch {
	if program == "" {
		return supervisorwatch.Follow(nil)
	}
	return supervisorwatch.Follow(func(ctx context.Context) {
		_ = c.Logs(ctx, supervisor.LogsRequest{Name: program, Follow: true}, io.Discard)
	})
}
