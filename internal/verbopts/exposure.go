package verbopts

import (
	"net/netip"

	"github.com/hermesbox/hbx/internal/config"
)

// SmokeListen is the address a scratch instance (install.smoke_command's,
// hbx upgrade's rehearsal) listens on: executor.listen, but loopback of
// the same family when executor.exposure is network. A scratch instance
// is never exposed.
func SmokeListen(cfg *config.Config) string {
	if cfg.Executor.Exposure != config.ExposureNetwork {
		return cfg.Executor.Listen
	}
	if a, err := netip.ParseAddr(cfg.Executor.Listen); err == nil && a.Is6() {
		return "::1"
	}
	return "127.0.0.1"
}
