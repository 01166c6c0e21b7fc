package upgrade

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// toolsConfig is fake's Config that also records each pinned tool set.
type toolsConfig struct {
	*fake
	pinned []*Tools
}

func (c *toolsConfig) Pin(r Release) (string, error) {
	c.pinned = append(c.pinned, r.MCPTools)
	return c.fake.Pin(r)
}

// TestToolsPinnedWithRelease: the tool set of the target is pinned with
// the new release, the config file's one is recorded with the old release
// and put back by a rollback, after a failed health wait as after hbx
// rollback; without a target tool set the file's one stays.
func TestToolsPinnedWithRelease(t *testing.T) {
	three := &Tools{Names: []string{"execute", "resume", "skills"}}
	unset := &Tools{}
	for _, tc := range []struct {
		name       string
		target     Target
		failHealth error
		rollback   bool
		want       []*Tools // the tool sets pinned, in order
	}{
		{name: "upgrade", target: Target{MCPTools: three, Current: unset}, want: []*Tools{three}},
		{name: "upgrade then rollback", target: Target{MCPTools: three, Current: unset}, rollback: true, want: []*Tools{three, unset}},
		{name: "failed health rolls back", target: Target{MCPTools: three, Current: unset}, failHealth: errors.New("unexpected \"skills\""), want: []*Tools{three, unset}},
		{name: "no tool set keeps the file's", target: Target{Current: three}, rollback: true, want: []*Tools{three, three}},
		{name: "not known", target: Target{}, rollback: true, want: []*Tools{nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, opts := newFake(t)
			c := &toolsConfig{fake: f}
			opts.Config = c
			f.failHealth = tc.failHealth
			tc.target.Image, tc.target.IndexDigest = newRel.Image, newRel.IndexDigest
			res, err := Upgrade(context.Background(), opts, tc.target)
			if (err != nil) != (tc.failHealth != nil) {
				t.Fatalf("Upgrade() = %v", err)
			}
			if err == nil {
				j, jerr := ReadJournal(opts.RuntimeDir)
				if jerr != nil {
					t.Fatal(jerr)
				}
				if diff := cmp.Diff([]*Tools{tc.target.Current, res.New.MCPTools}, []*Tools{j.Old.MCPTools, j.New.MCPTools}); diff != "" {
					t.Errorf("journal tool sets (-want +got):\n%s", diff)
				}
			}
			if tc.rollback {
				if _, err := Rollback(context.Background(), opts); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.want, c.pinned); diff != "" {
				t.Errorf("pinned tool sets (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseTools: --mcp-tools takes comma-separated names, at least one,
// none blank or repeated.
func TestParseTools(t *testing.T) {
	got, err := ParseTools(" execute, resume,skills")
	if err != nil || !cmp.Equal(got, []string{"execute", "resume", "skills"}) {
		t.Errorf("ParseTools(ok) = %q, %v", got, err)
	}
	for v, want := range map[string]string{
		"":        `"" has an empty tool name (want names such as execute,resume,skills)`,
		"a,,b":    `"a,,b" has an empty tool name (want names such as execute,resume,skills)`,
		"a, b ,a": `"a, b ,a" lists "a" twice`,
	} {
		if _, err := ParseTools(v); err == nil || err.Error() != want {
			t.Errorf("ParseTools(%q) = %v, want %q", v, err, want)
		}
	}
}

// TestTargetWithTools: the tool set asked for goes with the new release,
// the config file's current one with the old; none asked leaves MCPTools
// nil.
func TestTargetWithTools(t *testing.T) {
	var tg Target
	tg.WithTools([]string{"execute"}, []string{"execute", "resume"})
	if tg.MCPTools == nil || !cmp.Equal(tg.MCPTools.Names, []string{"execute"}) || tg.Current == nil || !cmp.Equal(tg.Current.Names, []string{"execute", "resume"}) {
		t.Errorf("WithTools(execute) = MCPTools %v, Current %v", tg.MCPTools, tg.Current)
	}
	tg = Target{}
	if tg.WithTools(nil, nil); tg.MCPTools != nil || tg.Current == nil {
		t.Errorf("WithTools(nil) = MCPTools %v, Current %v; want none asked, the current set recorded", tg.MCPTools, tg.Current)
	}
}
