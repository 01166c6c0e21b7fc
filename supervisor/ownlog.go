package supervisor

import (
	"errors"
	"fmt"
	"os"
)

// checkOwnLog checks the log file a program writes itself before it is
// followed: one is configured, and the path is absent (it may come) or a
// regular file, not a symbolic link (the program's user controls its
// directory; the supervisor reads as root). Only this check, at the
// request's start, refuses a link: one swapped in later (a rotation) is
// followed, and what it shows goes to the socket's users (mode 0600, the
// supervisor's user).
func checkOwnLog(p Program) error {
	if p.OwnLog == "" {
		return NoOwnLog(p.Name)
	}
	st, err := os.Lstat(p.OwnLog)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("log file %s: %w", p.OwnLog, err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("log file %s is not a regular file (%s)", p.OwnLog, st.Mode().Type())
	}
	return nil
}

// NoOwnLog is the error for --file on program name, which writes no log
// of its own: it says what to read instead. The built-in executor never
// has one (programs.executor.log_file cannot be set).
func NoOwnLog(name string) error {
	if name == "executor" {
		return fmt.Errorf("program executor has no log file of its own (programs.executor.log_file cannot be set): its output is in `hbx logs executor` and `hbx logs executor --stderr`")
	}
	return fmt.Errorf("program %s has no log file of its own (programs.%s.log_file is not set): its output is in `hbx logs %s` and `hbx logs %s --stderr`", name, name, name, name)
}
