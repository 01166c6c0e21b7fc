package ui

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// configFlagsIntro heads ConfigFlagsText: how a flag, an HBX_* variable
// and a file key name one setting, and which wins.
const configFlagsIntro = `Every config key is also a flag on every hbx command and an HBX_*
environment variable: --executor-port, HBX_EXECUTOR_PORT and the file's
executor.port are one setting. Flags beat the environment, which beats the
config file, which beats the defaults. "hbx config show" prints the values
in force and their sources; docs/configuration.md#configuration describes
each key.

`

// ConfigFlagsText writes "hbx config flags": a short introduction, then
// the flags of fs (config.RegisterFlags's, one per config key) in pflag's
// usage format, the hidden ones included. It does not change fs.
func ConfigFlagsText(w io.Writer, fs *pflag.FlagSet) error {
	shown := pflag.NewFlagSet("config-flags", pflag.ContinueOnError)
	fs.VisitAll(func(f *pflag.Flag) {
		c := *f
		c.Hidden = false
		shown.AddFlag(&c)
	})
	_, err := fmt.Fprint(w, configFlagsIntro+strings.TrimRight(shown.FlagUsages(), " \n")+"\n")
	return err
}
