package backup

import (
	"errors"
	"fmt"
	"os"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/config"
)

// ConfigFile is Config over the config file at Path, loaded as Config
// from the sources Sources: a restore pins the archive's release where
// the supervisor reads it, as hbx upgrade does, with the same refusals.
type ConfigFile struct {
	Path   string
	Config *config.Config
	// Sources says where each key came from; nil when not known (a
	// recovery): then CanPin checks only that the file exists.
	Sources *config.Sources
}

// Pinned reads the pin from the config file as it is now; what the file
// does not set is the loaded configuration's value (all of it without a
// file).
func (f ConfigFile) Pinned() (string, digest.Digest, error) {
	key := f.Config.PinKey()
	img, man, err := config.ReadPin(f.Path, key)
	if errors.Is(err, config.ErrNoFile) {
		return f.Config.Executor.Image, digest.Digest(f.Config.Executor.PlatformDigests[key]), nil
	}
	if err != nil {
		return "", "", err
	}
	if img == "" {
		img = f.Config.Executor.Image
	}
	return img, digest.Digest(man), nil
}

// CanPin refuses what hbx upgrade refuses: no config file on disk, or
// the pin set by an HBX_* variable or a flag (which override the file).
func (f ConfigFile) CanPin() error {
	if _, err := os.Stat(f.Path); err != nil {
		return fmt.Errorf("no config file at %s to pin it in (%w): create it, or pass --config or set HBX_CONFIG", f.Path, err)
	}
	for _, k := range []string{"executor.image", "executor.platform_digests"} {
		if s := f.Sources.Of(k); s.Kind == config.SourceEnv || s.Kind == config.SourceFlag {
			return fmt.Errorf("%s is set by %s, which overrides the config file: unset it", k, s)
		}
	}
	return nil
}

// Pin writes image and manifest into the config file, keeping its other
// content and comments.
func (f ConfigFile) Pin(image string, manifest digest.Digest) error {
	return config.WritePin(f.Path, image, f.Config.PinKey(), manifest.String())
}
