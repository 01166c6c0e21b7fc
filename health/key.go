package health

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/hermesbox/hbx/internal/names"
	"github.com/hermesbox/hbx/internal/regfile"
)

// ErrKey is wrapped by the errors of ReadKeyFile and ReadKey: a key file
// that is missing, readable by others or empty, an empty standard input.
var ErrKey = errors.New("bad MCP key")

// maxKeyBytes bounds what ReadKey reads.
const maxKeyBytes = 64 << 10

// Key is an MCP bearer key. It never shows itself: fmt, slog and
// encoding/json render it as "[redacted]", so a key passed by mistake to a
// log call or an error message does not leak. Only the MCP request header
// carries its value.
type Key struct{ v string }

// String returns "[redacted]", or "" for the zero Key.
func (k Key) String() string {
	if k.v == "" {
		return ""
	}
	return "[redacted]"
}

// GoString is String, for %#v.
func (k Key) GoString() string { return k.String() }

// LogValue is String, for slog.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// MarshalText is String, for encoding/json and friends.
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// IsZero reports whether k holds no key.
func (k Key) IsZero() bool { return k.v == "" }

// NewKey returns s as a Key, without surrounding white space.
func NewKey(s string) Key { return Key{strings.TrimSpace(s)} }

// ReadKey reads a key from r (standard input): its first line, without
// surrounding white space, of at most 64 KiB. An empty first line, or one
// that is not one key (names.BearerKey, the grammar executor.token_file
// obeys too), is an error wrapping ErrKey that never quotes the line.
func ReadKey(r io.Reader) (Key, error) {
	line, err := bufio.NewReader(io.LimitReader(r, maxKeyBytes)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return Key{}, fmt.Errorf("read MCP key: %w", err)
	}
	k := NewKey(line)
	if k.IsZero() {
		return Key{}, fmt.Errorf("%w: the first line is empty", ErrKey)
	}
	if !names.BearerKey(k.v) {
		return Key{}, fmt.Errorf("%w: the first line is not one key (want one word of ASCII letters, digits and -._~+/, then any '=', at most %d bytes)", ErrKey, names.MaxBearerKey)
	}
	return k, nil
}

// ReadKeyFile reads a key from the first line of path, which must be a
// regular file that neither its group nor others may read or write (mode
// 0600 or stricter, checked on the descriptor read), like Executor's own
// key file, of at most 64 KiB as executor.token_file (the same file in a
// Docker box). Errors wrap ErrKey and name the file, never its content.
func ReadKeyFile(path string) (Key, error) {
	b, perm, err := regfile.ReadPrivate(path, maxKeyBytes)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrKey, err)
	}
	if perm&0o077 != 0 {
		return Key{}, fmt.Errorf("%w: %s is mode %04o, want 0600 or stricter", ErrKey, path, perm)
	}
	k, err := ReadKey(bytes.NewReader(b))
	if err != nil {
		return Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}
