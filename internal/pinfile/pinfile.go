// Package pinfile is the config file's pin of the release: executor.image,
// the configured platform's manifest digest in executor.platform_digests
// and the MCP tool set pinned with a release (health.mcp_tools). It is the
// one type that reads and writes the pin; a restore (backup.Config) and a
// release change (upgrade.Config, through the composer's adapter) both go
// through it, with the same refusals: no config file on disk, or the pin
// set by an HBX_* variable or a flag, which override the file. See
// docs/upgrade.md and docs/backup.md.
package pinfile

import (
	"errors"
	"fmt"
	"os"
	"strings"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/config"
)

// pinKeys are the keys a release's pin is written to.
var pinKeys = []string{"executor.image", "executor.platform_digests"}

// File is the config file at Path, which Config was loaded from.
type File struct {
	Path   string
	Config *config.Config
	// Sources says where each key came from; nil when not known (a
	// recovery): then CanPin checks only that the file exists.
	Sources *config.Sources
}

// overriding returns where key is set when an HBX_* variable or a flag
// sets it, which then wins over the config file; false otherwise (also
// when Sources is nil: not known).
func (f File) overriding(key string) (config.Source, bool) {
	s := f.Sources.Of(key)
	return s, s.Kind == config.SourceEnv || s.Kind == config.SourceFlag
}

// Pinned reads the pin from the config file as it is now; what the file
// does not set is the loaded configuration's value (all of it without a
// file).
func (f File) Pinned() (string, digest.Digest, error) {
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

// CanPin refuses what a restore across releases cannot pin: no config
// file on disk, or the pin set by an HBX_* variable or a flag.
func (f File) CanPin() error {
	if _, err := os.Stat(f.Path); err != nil {
		return fmt.Errorf("no config file at %s to pin it in (%w): create it, or pass --config or set HBX_CONFIG", f.Path, err)
	}
	for _, k := range pinKeys {
		if s, ok := f.overriding(k); ok {
			return fmt.Errorf("%s is set by %s, which overrides the config file: unset it", k, s)
		}
	}
	return nil
}

// CheckUpgrade refuses, before anything happens, an upgrade whose pin
// cannot be written to the file or would be overridden there (the
// running supervisor reads the pin from that file at each start, so such
// an upgrade could only roll back), and a tool set (tools, nil: none
// asked) the health gate cannot check or the file cannot pin. It only
// reads.
func (f File) CheckUpgrade(tools []string) error {
	if _, err := os.Stat(f.Path); err != nil {
		return fmt.Errorf("no config file at %s to pin the new release in (%v): create it, or pass --config or set HBX_CONFIG", f.Path, err)
	}
	for _, k := range pinKeys {
		if s, ok := f.overriding(k); ok {
			return fmt.Errorf("%s is set by %s, which overrides the config file, where the upgrade pins the new release: unset it", k, s)
		}
	}
	if tools == nil {
		return nil
	}
	if f.Config.Health.TokenFile == "" {
		return errors.New("--mcp-tools needs health.token_file: the health gate lists the tools with the MCP key")
	}
	if s, ok := f.overriding("health.mcp_tools"); ok {
		return fmt.Errorf("--mcp-tools: health.mcp_tools is set by %s, which overrides the config file, where --mcp-tools pins the tool set: unset it", s)
	}
	return nil
}

// ToolsOverridden reports whether an HBX_* variable or a flag sets
// health.mcp_tools, which then wins over the tool set pinned with a
// release.
func (f File) ToolsOverridden() bool {
	_, ok := f.overriding("health.mcp_tools")
	return ok
}

// Tools reads the tool set the file pins now (health.mcp_tools; nil when
// it sets none). An unreadable file or value is an error.
func (f File) Tools() ([]string, error) {
	current, err := config.ReadMCPTools(f.Path)
	if err != nil {
		return nil, fmt.Errorf("read health.mcp_tools: %w", err)
	}
	return current, nil
}

// Pin writes image and manifest into the config file, keeping its other
// content and comments; manifest "" removes the platform's pin.
func (f File) Pin(image string, manifest digest.Digest) error {
	return config.WritePin(f.Path, image, f.Config.PinKey(), manifest.String())
}

// PinRelease writes image, manifest and, unless tools.Keep, the tool set
// tools.Names in one write. Without a file on disk it writes nothing and
// returns a note saying what to set; it also returns a note when HBX_*
// variables or flags override what it wrote; "" otherwise.
func (f File) PinRelease(image string, manifest digest.Digest, tools config.PinTools) (string, error) {
	key := f.Config.PinKey()
	err := config.WritePinTools(f.Path, image, key, manifest.String(), tools)
	if errors.Is(err, config.ErrNoFile) {
		return fmt.Sprintf("no config file at %s: nothing written; set executor.image to %s (and executor.platform_digests.%s to %s) so the next boot pins it", f.Path, image, key, manifest), nil
	}
	if err != nil {
		return "", err
	}
	var notes []string
	keys := pinKeys
	if !tools.Keep {
		keys = append(keys[:len(keys):len(keys)], "health.mcp_tools")
	}
	for _, k := range keys {
		if s, ok := f.overriding(k); ok {
			notes = append(notes, fmt.Sprintf("%s is set by %s, which overrides the config file: change it there", k, s))
		}
	}
	return strings.Join(notes, "; "), nil
}
