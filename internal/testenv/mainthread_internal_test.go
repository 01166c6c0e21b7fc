//go:build linux

package testenv

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAwaitMainThreadExitNamesAProcessThatKeepsIt: a process whose main
// thread lives (this one) is waited for only as long as asked, and the
// error names it.
func TestAwaitMainThreadExitNamesAProcessThatKeepsIt(t *testing.T) {
	err := awaitMainThreadExit(os.Getpid(), 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())+": main thread not exited") {
		t.Fatalf("awaitMainThreadExit(self, 50ms) = %v, want the process named", err)
	}
}
