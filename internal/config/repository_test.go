package config

import "testing"

func TestRepositoryAllowed(t *testing.T) {
	const (
		old   = "ghcr.io/rhyssullivan/executor-selfhost"
		new   = "ghcr.io/usefulsoftwareco/executor-selfhost"
		other = "ghcr.io/evil/payload"
		pin   = ":v1.5.12@sha256:e40b2179c005b3124e794e9a8505341db46d0a9a1631e7f3fdcd023462ecf70b"
	)
	for _, tc := range []struct {
		name    string
		image   string
		mirrors []string
		repo    string
		want    bool
	}{
		{"configured repository", old + pin, nil, old, true},
		{"another repository", old + pin, nil, other, false},
		{"empty name", old + pin, nil, "", false},
		{"new home without a mirror", old + pin, nil, new, false},
		{"mirror location of the configured one", old + pin, []string{old + "=" + new}, new, true},
		{"configured one is the mirror's location", new + pin, []string{old + "=" + new}, old, true},
		{"a mirror of another repository", old + pin, []string{other + "=ghcr.io/evil/mirror"}, "ghcr.io/evil/mirror", false},
		{"namespace mirror", old + pin, []string{"ghcr.io/rhyssullivan=registry.local:5000/rs"}, "registry.local:5000/rs/executor-selfhost", true},
		{"unparsable pin", "not a ref", nil, old, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			c.Executor.Image = tc.image
			c.Registry.Mirrors = tc.mirrors
			if got := c.RepositoryAllowed(tc.repo); got != tc.want {
				t.Errorf("RepositoryAllowed(%q) with image %q, mirrors %q = %v, want %v", tc.repo, tc.image, tc.mirrors, got, tc.want)
			}
		})
	}
}
