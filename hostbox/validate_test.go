// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateNameIsADNSLabel(t *testing.T) {
	for name, ok := range map[string]bool{
		"alice":                 true,
		"a":                     true,
		"box-2":                 true,
		"0day":                  true,
		strings.Repeat("a", 63): true,
		"":                      false,
		strings.Repeat("a", 64): false,
		"Alice":                 false,
		"-alice":                false,
		"alice-":                false,
		"al_ice":                false,
		"al.ice":                false,
		"../etc":                false,
		"al ice":                false,
		"ali\u00e7e":            false,
	} {
		err := ValidateName(name)
		if ok != (err == nil) {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", name, err, ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalid", name, err)
		}
	}
}

func TestParseVarRefusesWhatEnvCannotHold(t *testing.T) {
	for in, ok := range map[string]bool{
		"HEALTH_INTERVAL=2s": true,
		"A=":                 true,
		"A=has space$x":      true,
		"A":                  false,
		"=x":                 false,
		"lower=x":            false,
		"1A=x":               false,
		"A-B=x":              false,
		"A=it's":             false,
		"A=two\nlines":       false,
		"A=nul\x00":          false,
		"A=in\\side":         true,
		// Compose reads \' as an escaped quote: a value ending in a
		// backslash would swallow the next line and let a later value
		// define variables of its own.
		"A=x\\":   false,
		"A=x\\\\": false,
	} {
		_, err := ParseVar(in)
		if ok != (err == nil) {
			t.Errorf("ParseVar(%q) = %v, want ok=%v", in, err, ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseVar(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

// TestSetRefusesComposeAndDockerVariables: Compose reads COMPOSE_* from a
// project's .env (COMPOSE_PROJECT_NAME=hbx-bob makes box alice act on bob's
// containers and volumes, COMPOSE_FILE swaps the compose file), so new's
// --set must not write them, nor the variables new sets itself.
func TestSetRefusesComposeAndDockerVariables(t *testing.T) {
	for v, ok := range map[string]bool{
		"HEALTH_INTERVAL=2s":           true,
		"AGENT_IMAGE=x:1":              true,
		"BIND_ADDRESS=0.0.0.0":         false, // --bind: the port is checked there
		"COMPOSE_PROJECT_NAME=hbx-bob": false,
		"COMPOSE_FILE=/etc/evil.yaml":  false,
		"COMPOSE_PROFILES=x":           false,
		"DOCKER_HOST=tcp://x:2375":     false,
		"BOX=bob":                      false,
		"HOST_PORT=1":                  false,
		"MCP_KEY_FILE=/etc/shadow":     false,
		"BACKUP_PASSPHRASE_FILE=/x":    false,
	} {
		pv, err := ParseVar(v)
		if err == nil {
			err = CheckSetVar(pv)
		}
		if ok != (err == nil) {
			t.Errorf("CheckSetVar(%q) = %v, want ok=%v", v, err, ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckSetVar(%q) = %v, want ErrInvalid", v, err)
		}
	}
}

func TestEnvFormatParseRoundTrip(t *testing.T) {
	e := Env{{"BOX", "alice"}, {"HOST_PORT", "4788"}, {"MCP_KEY_FILE", "/root/my boxes/alice/mcp.key"}, {"X", "$NOT_INTERPOLATED"}}
	data, err := e.Format("header line\nsecond")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "# header line\n# second\n") {
		t.Errorf("Format: %q, want the header as comments", data)
	}
	got, err := ParseEnv(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(e) {
		t.Fatalf("ParseEnv(Format(e)) = %v, want %v", got, e)
	}
	for i := range e {
		if got[i] != e[i] {
			t.Errorf("variable %d = %v, want %v", i, got[i], e[i])
		}
	}
	if _, err := (Env{{"A", "it's"}}).Format(""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Format of a quote = %v, want ErrInvalid", err)
	}
}

func TestParseEnvRefusesMalformedLines(t *testing.T) {
	for name, in := range map[string]string{
		"no equals":    "BOX=a\nGARBAGE\n",
		"bad key":      "box=a\n",
		"unterminated": "BOX='a\n",
		"mixed quotes": "BOX='a\"\n",
	} {
		if _, err := ParseEnv([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ParseEnv(%q) = %v, want ErrInvalid", name, in, err)
		}
	}
	e, err := ParseEnv([]byte("# c\n\n  BOX=bare  \nP=\"dq\"\nP='later wins'\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Get("BOX") != "bare" || e.Get("P") != "later wins" || len(e) != 2 {
		t.Errorf("ParseEnv = %v, want BOX=bare and P='later wins'", e)
	}
}

func TestParsePSReadsBothShapes(t *testing.T) {
	lines := `{"Service":"executor","State":"running","Health":"healthy","Status":"Up 3 seconds (healthy)"}
{"Service":"agent","State":"exited","Health":"","Status":"Exited (0)"}
`
	array := `[{"Service":"executor","State":"running","Health":"healthy"},{"Service":"agent","State":"exited"}]`
	for name, in := range map[string]string{"lines": lines, "array": array} {
		m, err := parsePS([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m["executor"].Health != "healthy" || m["agent"].State != "exited" || len(m) != 2 {
			t.Errorf("%s: parsePS = %+v", name, m)
		}
	}
	if m, err := parsePS(nil); err != nil || len(m) != 0 {
		t.Errorf("parsePS(empty) = %v, %v; want no services", m, err)
	}
	if _, err := parsePS([]byte("{oops")); err == nil {
		t.Error("parsePS of garbage: want an error")
	}
}

// TestBoxURLForEveryBindAddress: the URL the doctor and rotate-token
// probe is a valid one for an IPv6 address too, and a wildcard address
// is reached through its family's loopback.
func TestBoxURLForEveryBindAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"":          "http://127.0.0.1:4788/",
		"127.0.0.2": "http://127.0.0.2:4788/",
		"0.0.0.0":   "http://127.0.0.1:4788/",
		"::1":       "http://[::1]:4788/",
		"::":        "http://[::1]:4788/",
	} {
		b := Box{Env: Env{{"HOST_PORT", "4788"}, {"BIND_ADDRESS", addr}}}
		if got := b.URL(); got != want {
			t.Errorf("URL with BIND_ADDRESS=%q = %s, want %s", addr, got, want)
		}
	}
}
