package names

import (
	"strings"
	"testing"
)

func TestProgram(t *testing.T) {
	for s, want := range map[string]bool{
		"executor": true, "hermes": true, "a": true, "0x": true, "my-prog_2": true,
		strings.Repeat("a", 64): true, strings.Repeat("a", 65): false,
		"": false, "all": false, "-x": false, "_x": false, "Exec": false, "a b": false, "a/b": false, "é": false,
	} {
		if got := Program(s); got != want {
			t.Errorf("Program(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestEnvVar(t *testing.T) {
	for s, want := range map[string]bool{
		"PATH": true, "_x": true, "a1": true, "HOME_2": true,
		"": false, "1A": false, "A-B": false, "A=B": false, "A B": false, "É": false,
	} {
		if got := EnvVar(s); got != want {
			t.Errorf("EnvVar(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestBearerKey(t *testing.T) {
	for s, want := range map[string]bool{
		"0123abcdef": true, "exk_live-AZ.az~09+/": true, "YWJj==": true, "a=": true,
		"": false, "=": false, "==": false, "a b": false, "a\tb": false, "a\x00b": false, "ключ": false,
		"key\u00a0x": false, "\ufeffkey": false, strings.Repeat("a", MaxBearerKey): true, strings.Repeat("a", MaxBearerKey+1): false, "a=b": false, "a,b": false, "a\"b": false, "\xff": false,
	} {
		if got := BearerKey(s); got != want {
			t.Errorf("BearerKey(%q) = %v, want %v", s, got, want)
		}
	}
}
