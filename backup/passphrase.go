package backup

import (
	"errors"
	"fmt"
)

// Terminal asks the operator for a passphrase, echo off; cmd/hbx
// implements it on the controlling terminal.
type Terminal interface {
	Ask(prompt string) ([]byte, error)
}

// PassphraseSource returns the archives' passphrase source: the file
// (ReadPassphraseFile) when file is not "", else the terminal open
// returns (closed with the func it returns), asked once, or twice with
// confirm. It never reads an argument or the environment. Without a
// terminal the error wraps ErrNoPassphrase and says how to give one; so
// does an empty answer; two answers that differ are refused.
func PassphraseSource(file string, confirm bool, open func() (Terminal, func(), error)) PassphraseFunc {
	return func() ([]byte, error) {
		if file != "" {
			return ReadPassphraseFile(file)
		}
		tty, closeTTY, err := open()
		if err != nil {
			return nil, fmt.Errorf("%w: set backup.passphrase_file, or run hbx on a terminal to be asked", ErrNoPassphrase)
		}
		defer closeTTY()
		p, err := tty.Ask("Backup passphrase: ")
		if err != nil {
			return nil, err
		}
		if len(p) == 0 {
			return nil, ErrNoPassphrase
		}
		if confirm {
			again, err := tty.Ask("Repeat it: ")
			if err != nil {
				return nil, err
			}
			if string(again) != string(p) {
				return nil, errors.New("the passphrases differ")
			}
		}
		return p, nil
	}
}
