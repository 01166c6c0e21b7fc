package supervisor

import (
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// lowestFreeFD returns the descriptor number the next open gets.
func lowestFreeFD(t *testing.T) int {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	f.Close()
	return fd
}

// TestOpenLogsClosesWhatItOpenedWhenAPipeFails: when a program's output
// pipe cannot be made (the descriptor limit reached), openLogs fails
// naming the program and the pipe, and closes the log file it had just
// opened for it: the descriptor is free again, nothing leaks. The limit
// (RLIMIT_NOFILE) is set two above the lowest free descriptor, so the log
// file opens and the pipe's second end cannot.
func TestOpenLogsClosesWhatItOpenedWhenAPipeFails(t *testing.T) {
	p := shProgram(t, progDir(t, "p"), "p", `exec sleep 1000`)
	s, err := New(Options{Programs: []Program{p}})
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	before := lowestFreeFD(t)
	limit := syscall.Rlimit{Cur: uint64(before + 2), Max: old.Max}
	var wg sync.WaitGroup
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	closers, err := s.openLogs(&wg)
	if rerr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); rerr != nil {
		t.Fatal(rerr)
	}
	wg.Wait()
	if err == nil {
		for _, c := range closers {
			c.Close()
		}
		t.Fatalf("openLogs under a limit of %d descriptors = nil, want the pipe's failure", limit.Cur)
	}
	if !strings.Contains(err.Error(), "program p: pipe: ") {
		t.Errorf("openLogs = %v, want it to name the program and the pipe", err)
	}
	if after := lowestFreeFD(t); after != before {
		t.Errorf("lowest free descriptor %d after the failure, %d before: the log file opened for p is left open", after, before)
	}
	if len(s.logs) != 0 {
		t.Errorf("s.logs = %d writers after the failure, want none", len(s.logs))
	}
}
