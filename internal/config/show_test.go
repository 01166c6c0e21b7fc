package config

import (
	"testing"
	"time"
)

func TestYAMLValue(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{"ghcr.io/o/x:v1@sha256:ab", "ghcr.io/o/x:v1@sha256:ab"},
		{"/storage/executor-runtime", "/storage/executor-runtime"},
		{"127.0.0.1", "127.0.0.1"},
		{"linux/arm64", "linux/arm64"},
		{"", `""`},
		{"::1", `"::1"`},
		{"1000", `"1000"`},
		{"0x10", `"0x10"`},
		{"true", `"true"`},
		{"No", `"No"`},
		{"a b", `"a b"`},
		{"a#b", `"a#b"`},
		{"-x", `"-x"`},
		{"x:", `"x:"`},
		{4788, "4788"},
		{int64(1 << 34), "17179869184"},
		{true, "true"},
		{30 * time.Second, "30s"},
		{[]string{}, "[]"},
		{[]string{"127.0.0.1:5000", "[::1]:5000"}, `[127.0.0.1:5000, "[::1]:5000"]`},
		{map[string]string{"linux/arm64": "sha256:b", "linux/amd64": "sha256:a"}, "{linux/amd64: sha256:a, linux/arm64: sha256:b}"},
		{map[string]string{}, "{}"},
	}
	for _, tt := range tests {
		if got := yamlValue(tt.in); got != tt.want {
			t.Errorf("yamlValue(%#v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
