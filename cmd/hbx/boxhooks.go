package main

// The hooks the box (internal/box) takes from the command layer: the
// supervisor's services, the backup passphrase, the data lock and the
// restore's pieces, each a call into this package and nothing more.

import (
	"context"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/box"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
)

// preUpgradeName starts the file name of every pre-upgrade archive.
const preUpgradeName = box.PreUpgradeName

// box is cfg's box (srcs: where its values came from, nil when not known)
// with this command's hooks.
func (g *globals) box(cfg *config.Config, srcs *config.Sources) box.Box {
	return box.Box{Config: cfg, Sources: srcs, ConfigPath: g.configPath, Log: g.log, Hooks: box.Hooks{
		Dial: func(ctx context.Context, c *config.Config) (box.Supervised, error) {
			svc, err := dialServices(ctx, g, c)
			if svc == nil {
				return nil, err
			}
			return svc, err
		},
		Passphrase: func(c *config.Config) ([]byte, error) { return passphrase(c, false)() },
		Owner:      lookupOwner,
		LockUnsupervised: func(ctx context.Context, c *config.Config, command string) (func(), error) {
			return lockDataUnsupervised(ctx, g, c, nil, command)
		},
		RestoreRuntime: func(c *config.Config) backup.Runtime { return installRuntime{g: g, cfg: c} },
		RestorePin:     func(c *config.Config) backup.Config { return restorePinner{g: g, cfg: c} },
		RecoverRestore: func(ctx context.Context, c *config.Config, srcs *config.Sources, svc box.Supervised) error {
			s, _ := svc.(*supervisorServices)
			return recoverRestoreFor(ctx, g, c, srcs, s)
		},
	}}
}

// SetProbe makes p the readiness probe of the waits (box.Supervised).
func (s *supervisorServices) SetProbe(p supervisor.Probe) supervisor.Probe {
	old := s.probe
	s.probe = p
	return old
}

// watchSupervisor and readinessProbe are box's, under the names
// backup.go calls them by.
var (
	watchSupervisor = box.WatchSupervisor
	readinessProbe  = box.ReadinessProbe
)
