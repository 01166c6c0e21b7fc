package verbopts

import (
	"net/netip"

	"github.com/hermesbox/hbx/internal/config"
)

// smokeListen is the address install.smoke_command's scratch instance
// listens on: executor.listen, but loopback of the same family when
// executor.exposure is network. A scratch instance is never exposed.
func smokeListen(cfg *config.Config) string {
	if cfg.Executor.Exposure != config.ExposureNetwork {
		return cfg.Executor.Listen
	}
	if a, err := netip.ParseAddr(cfg.Executor.Listen); err == nil && a.Is6() {
		return "::1"
	}
	return "127.0.0.1"
}
