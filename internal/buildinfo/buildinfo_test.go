package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}}
	dirty := append(append([]debug.BuildSetting(nil), rev...), debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	for _, c := range []struct {
		name                    string
		version, commit         string
		main                    string
		settings                []debug.BuildSetting
		wantVersion, wantCommit string
	}{
		{"stamped by the Makefile", "v1.2.0-3-gabc", "abc1234", "(devel)", rev, "v1.2.0-3-gabc", "abc1234"},
		{"go build in a checkout", "dev", "unknown", "(devel)", rev, "dev", "0123456789ab"},
		{"go build of changed files", "dev", "unknown", "(devel)", dirty, "dev", "0123456789ab-dirty"},
		{"go install module@version", "dev", "unknown", "v1.3.0", nil, "v1.3.0", "unknown"},
		{"nothing recorded", "dev", "unknown", "", nil, "dev", "unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/hermesbox/hbx", Version: c.main}, Settings: c.settings}
			v, cm := fromBuildInfo(c.version, c.commit, bi)
			if v != c.wantVersion || cm != c.wantCommit {
				t.Errorf("fromBuildInfo(%q, %q, %v) = %q, %q; want %q, %q", c.version, c.commit, bi.Settings, v, cm, c.wantVersion, c.wantCommit)
			}
		})
	}
}

func TestPlatform(t *testing.T) {
	if got, want := Platform(), runtime.GOOS+"/"+runtime.GOARCH; got != want {
		t.Errorf("Platform() = %q, want %q", got, want)
	}
}
