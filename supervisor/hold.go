package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/internal/regfile"
)

// HeldPath is the file beside the control socket where a process holding
// on its start-up error (HoldOnError) keeps that error: <socket>.held.
func HeldPath(socket string) string { return socket + ".held" }

// HoldOnError keeps a process whose supervisor could not start up, so a
// container's PID 1 stays up with its error instead of exiting into a
// restart loop: it writes "<pid>\n<cause>\n" to held (mode 0600, its
// directory created 0755; held "" writes nothing), makes the process a
// child subreaper and reaps every child on SIGCHLD, logs and ignores the
// signals of Signals that do not stop, and returns cause once a
// SignalStop signal arrives or ctx ends, removing held first (when it
// still names this process). Failing to
// write held is logged, not fatal.
func HoldOnError(ctx context.Context, log *slog.Logger, held string, cause error) error {
	sigs := make([]os.Signal, 0, len(Signals)+1)
	for sig := range Signals {
		sigs = append(sigs, sig)
	}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, append(sigs, syscall.SIGCHLD)...)
	defer signal.Stop(ch)
	if err := setSubreaper(); err != nil {
		log.Warn("hold: not a child subreaper", "err", err)
	}
	if held != "" {
		if err := writeHeld(held, cause); err != nil {
			log.Warn("hold: write the start-up error for hbx health", "path", held, "err", err)
		} else {
			defer removeHeld(held)
		}
	}
	log.Info("hold: the supervisor did not start; staying up with its error until TERM, INT or QUIT", "pid", os.Getpid())
	reapAll()
	for {
		select {
		case <-ctx.Done():
			return cause
		case v := <-ch:
			sig := v.(syscall.Signal)
			switch {
			case sig == syscall.SIGCHLD:
				reapAll()
			case Signals[sig] == SignalStop:
				log.Info("signal: stopping the hold", "signal", unix.SignalName(sig))
				return cause
			case sig != syscall.SIGPIPE:
				log.Info("signal: ignored while holding", "signal", unix.SignalName(sig))
			}
		}
	}
}

// reapAll collects every exited child without blocking.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}

// writeHeld durably writes the held file: this pid, then cause on one
// line.
func writeHeld(path string, cause error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	msg := strings.ReplaceAll(cause.Error(), "\n", " ")
	return atomicfile.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"+msg+"\n"), 0o600)
}

// removeHeld removes the held file when it still names this process: a
// second hbx supervise on the same socket may have written its own since.
func removeHeld(path string) {
	if _, pid, ok, _ := ReadHeld(path); ok && pid == os.Getpid() {
		_ = os.Remove(path)
	}
}

// ReadHeld returns the start-up error that a live process holds on (see
// HoldOnError) through the held file path, and that process's pid. ok is false
// when there is no such file, or its process is gone (a stale file); err
// is set when the file cannot be read or is malformed.
func ReadHeld(path string) (msg string, pid int, ok bool, err error) {
	b, err := regfile.ReadFileNoFollow(path, 64<<10)
	if errors.Is(err, os.ErrNotExist) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("read %s: %w", path, err)
	}
	first, rest, _ := strings.Cut(string(b), "\n")
	pid, err = strconv.Atoi(first)
	if err != nil || pid <= 0 {
		return "", 0, false, fmt.Errorf("read %s: does not start with a pid", path)
	}
	if !procscan.Alive(pid) {
		return "", 0, false, nil
	}
	return strings.TrimSpace(rest), pid, true, nil
}
