package backup

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestPruneKeepsSpared: an archive named in Options.Spare (the
// pre-upgrade archive hbx rollback still needs) outlives backup.keep and
// does not count toward it; the others are pruned as before.
func TestPruneKeepsSpared(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "a 0644 x")
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	var made []string
	for i := range 4 {
		res := b.backup(func(o *Options) {
			o.Keep = 1
			if len(made) > 0 {
				o.Spare = []string{made[0]}
			}
			o.Now = func() time.Time { return now.Add(time.Duration(i) * time.Hour) }
		})
		made = append(made, res.Path)
	}
	list, err := List(b.backups, "executor")
	must(t, err)
	var got []string
	for _, in := range list {
		got = append(got, in.Path)
	}
	if diff := cmp.Diff(got, []string{made[3], made[0]}); diff != "" {
		t.Errorf("archives kept with keep 1 and the first spared (-got +want):\n%s", diff)
	}
}

// TestPruneKeepsSparedNamedAnotherWay: the spare is the path upgrade.json
// recorded when the archive was made; backup.dir may name the same
// directory another way since (a symlink to it, the directory moved and
// linked): the archive is still spared. Before, only the same spelling
// matched, and backup.keep pruned the archive hbx rollback restores.
func TestPruneKeepsSparedNamedAnotherWay(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "a 0644 x")
	link := filepath.Join(t.TempDir(), "backups-link")
	must(t, os.Symlink(b.backups, link))
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	var made []string
	for i := range 3 {
		res := b.backup(func(o *Options) {
			o.Keep = 1
			if len(made) > 0 {
				o.Spare = []string{filepath.Join(link, filepath.Base(made[0]))}
			}
			o.Now = func() time.Time { return now.Add(time.Duration(i) * time.Hour) }
		})
		made = append(made, res.Path)
	}
	list, err := List(b.backups, "executor")
	must(t, err)
	var got []string
	for _, in := range list {
		got = append(got, in.Path)
	}
	if diff := cmp.Diff(got, []string{made[2], made[0]}); diff != "" {
		t.Errorf("archives kept with keep 1 and the first spared through %s (-got +want):\n%s", link, diff)
	}
}
