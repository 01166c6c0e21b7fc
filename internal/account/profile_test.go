package account

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLookupProfile(t *testing.T) {
	root, err := LookupProfile("root")
	if err != nil {
		t.Fatalf("LookupProfile(root) = %v", err)
	}
	if root.Name != "root" || root.Home != "/root" || root.Shell == "" {
		t.Errorf("LookupProfile(root) = %+v, want root, /root and a shell", root)
	}
	self, err := LookupProfile("")
	if err != nil {
		t.Fatalf("LookupProfile(\"\") = %v", err)
	}
	if want, _ := Name(os.Geteuid()); self.Name != want {
		t.Errorf("LookupProfile(\"\").Name = %q, want %q", self.Name, want)
	}
	unlisted, err := LookupProfile("4242424")
	if err != nil || unlisted != (Profile{Name: "4242424", Home: "/", Shell: "/bin/sh"}) {
		t.Errorf("LookupProfile(unlisted uid) = %+v, %v", unlisted, err)
	}
	if _, err := LookupProfile("no-such-user-hbx"); err == nil {
		t.Error("LookupProfile(unknown name) = nil error")
	}
}

func TestPasswdShell(t *testing.T) {
	p := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(p, []byte("a:x:1:1::/home/a:/bin/zsh\nb:x:2:2::/home/b:\nbroken\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{{"a", "/bin/zsh"}, {"b", "/bin/sh"}, {"c", "/bin/sh"}} {
		if got := passwdShell(p, tc.name); got != tc.want {
			t.Errorf("passwdShell(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := passwdShell(filepath.Join(t.TempDir(), "none"), "a"); got != "/bin/sh" {
		t.Errorf("passwdShell(missing file) = %q", got)
	}
}
