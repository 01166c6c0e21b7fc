package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	digest "github.com/opencontainers/go-digest"
	yaml "go.yaml.in/yaml/v3"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/regfile"
	"github.com/hermesbox/hbx/release"
)

// ErrNoFile: WritePin found no config file to write to.
var ErrNoFile = errors.New("no config file")

// PinTools says what WritePinTools does with health.mcp_tools, the MCP
// tool set pinned with the image.
type PinTools struct {
	// Keep leaves health.mcp_tools as the file has it.
	Keep bool
	// Names, unless Keep, are the tool names health.mcp_tools is set to
	// (a YAML flow sequence); nil removes the key (the default applies).
	Names []string
}

// WritePin is WritePinTools leaving health.mcp_tools as it is.
func WritePin(path, image, key, manifest string) error {
	return WritePinTools(path, image, key, manifest, PinTools{Keep: true})
}

// WritePinTools sets executor.image to image and executor.platform_digests[key]
// to manifest (manifest "" removes key), and health.mcp_tools as tools
// says, in one write of the YAML file at path, keeping its other content and its
// comments (as far as yaml.v3's node round trip keeps them: comments stay,
// indentation becomes two spaces, quoting of untouched scalars is kept),
// and writes it atomically (atomicfile) with its mode, to the file a
// symlink at path points to (the link stays). It refuses a file
// whose result would not load with the same rules Load applies to the
// file's shape (a mapping at the top, executor a mapping). ErrNoFile when
// path does not exist.
func WritePinTools(path, image, key, manifest string, tools PinTools) error {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrNoFile, path)
	}
	if err != nil {
		return fmt.Errorf("stat config file: %w", err)
	}
	b, err := regfile.ReadFile(path, maxConfigBytes)
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%w: parse %s: %w", ErrInvalid, path, err)
	}
	if doc.Kind == 0 { // empty file
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("%w: %s: the top level is not a mapping", ErrInvalid, path)
	}
	exec, err := mapping(doc.Content[0], "executor")
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	setScalar(exec, "image", image)
	pins, err := mapping(exec, "platform_digests")
	if err != nil {
		return fmt.Errorf("%w: %s: executor.%w", ErrInvalid, path, err)
	}
	pins.Style &^= yaml.FlowStyle // "{}" grows into a block mapping
	if manifest == "" {
		deleteKey(pins, key)
	} else {
		setScalar(pins, key, manifest)
	}
	if err := setTools(doc.Content[0], tools); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	return writeYAML(path, &doc, st.Mode().Perm())
}

// setTools sets health.mcp_tools in the top mapping top as tools says.
func setTools(top *yaml.Node, tools PinTools) error {
	switch {
	case tools.Keep:
	case tools.Names == nil:
		// Removed; a file without a health section keeps having none.
		if h := lookup(top, "health"); h != nil && h.Kind == yaml.MappingNode {
			deleteKey(h, "mcp_tools")
		}
	default:
		health, err := mapping(top, "health")
		if err != nil {
			return err
		}
		setFlowList(health, "mcp_tools", tools.Names)
	}
	return nil
}

// writeYAML encodes doc with two-space indentation and writes it
// atomically with mode perm to the file path names, through a symlink.
func writeYAML(path string, doc *yaml.Node, perm os.FileMode) error {
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("encode config file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("encode config file: %w", err)
	}
	// A symlinked config file is written where it points: renaming over
	// the link would replace it with a copy and leave the real file stale.
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("resolve config file: %w", err)
	}
	return atomicfile.WriteFile(target, out.Bytes(), perm)
}

// ReadPin returns executor.image and executor.platform_digests[key] as
// the YAML file at path sets them ("" for what it does not set), the
// values WritePin writes. ErrNoFile when path does not exist.
func ReadPin(path, key string) (image, manifest string, err error) {
	b, err := regfile.ReadFile(path, maxConfigBytes)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("%w: %s", ErrNoFile, path)
	}
	if err != nil {
		return "", "", fmt.Errorf("read config file: %w", err)
	}
	var f struct {
		Executor struct {
			Image           string            `yaml:"image"`
			PlatformDigests map[string]string `yaml:"platform_digests"`
		} `yaml:"executor"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return "", "", fmt.Errorf("%w: parse %s: %w", ErrInvalid, path, err)
	}
	return f.Executor.Image, f.Executor.PlatformDigests[key], nil
}

// ReadMCPTools returns health.mcp_tools as the YAML file at path sets it
// (a sequence or a comma-separated string, as Load reads it), or nil when
// it does not set it: the value WritePinTools writes. ErrNoFile when path
// does not exist; ErrInvalid when the value is not a list.
func ReadMCPTools(path string) ([]string, error) {
	b, err := regfile.ReadFile(path, maxConfigBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoFile, path)
	}
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	var f struct {
		Health struct {
			MCPTools any `yaml:"mcp_tools"`
		} `yaml:"health"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: parse %s: %w", ErrInvalid, path, err)
	}
	if f.Health.MCPTools == nil {
		return nil, nil
	}
	v, rule := decodeList(f.Health.MCPTools)
	if rule != "" {
		return nil, fmt.Errorf("%w: %s: health.mcp_tools %s", ErrInvalid, path, rule)
	}
	return v.([]string), nil
}

// setFlowList sets key in m to the list names, as a flow sequence.
func setFlowList(m *yaml.Node, key string, names []string) {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
	for _, name := range names {
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name})
	}
	setNode(m, key, n)
}

// setNode sets key in m to n, keeping the comments of the value it
// replaces, or appends key when absent.
func setNode(m *yaml.Node, key string, n *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			old := m.Content[i+1]
			n.HeadComment, n.LineComment, n.FootComment = old.HeadComment, old.LineComment, old.FootComment
			m.Content[i+1] = n
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, n)
}

// lookup returns the value of key in the mapping m, nil when absent.
func lookup(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// deleteKey removes key and its value from the mapping m.
func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

// mapping returns the mapping under key in m, adding an empty one when
// key is absent.
func mapping(m *yaml.Node, key string) (*yaml.Node, error) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v := m.Content[i+1]
			if v.Kind == yaml.ScalarNode && (v.Tag == "!!null" || strings.TrimSpace(v.Value) == "") {
				*v = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			}
			if v.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("%s is not a mapping", key)
			}
			return v, nil
		}
	}
	v := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
	return v, nil
}

// setScalar sets key in m to the string value, double-quoted.
func setScalar(m *yaml.Node, key, value string) {
	setNode(m, key, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value, Style: yaml.DoubleQuotedStyle})
}

// PinKey returns the executor.platform_digests key that pins
// Executor.Platform: the platform itself ("linux/arm64/v8"), or its
// os/arch ("linux/arm64") when only that is pinned; the platform itself
// when neither is (the key a new pin is written under).
func (c *Config) PinKey() string {
	p := c.Executor.Platform
	if _, ok := c.Executor.PlatformDigests[p]; ok {
		return p
	}
	if parts := strings.Split(p, "/"); len(parts) == 3 {
		if _, ok := c.Executor.PlatformDigests[parts[0]+"/"+parts[1]]; ok {
			return parts[0] + "/" + parts[1]
		}
	}
	return p
}

// PlatformPin returns the pinned child manifest digest for
// Executor.Platform (under PinKey), or "" when it is not pinned.
func (c *Config) PlatformPin() string {
	return c.Executor.PlatformDigests[c.PinKey()]
}

// Release returns the configured release: executor.image, its index
// digest, executor.platform and that platform's pinned child manifest
// digest (PlatformPin, "" when not pinned). c must be valid (Load
// validates it); an image reference that does not parse leaves
// IndexDigest "".
func (c *Config) Release() release.Target {
	ref, _ := parseImageRef(c.Executor.Image)
	return release.Target{
		Image:          c.Executor.Image,
		IndexDigest:    ref.Digest,
		Platform:       c.Executor.Platform,
		ManifestDigest: digest.Digest(c.PlatformPin()),
	}
}
