package rehearse

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestRehearsalNamesTheRelease: the rehearsal's log and its refusal
// name the release rehearsed by its image, and never call it "the new
// release": an upgrade or install to an older pin (a downgrade) is
// rehearsed too. Before, both said "the new release" whatever the pin.
func TestRehearsalNamesTheRelease(t *testing.T) {
	const older = "registry.example/executor:v1.0.0@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	for _, mode := range []string{"serve", "exit"} {
		t.Run(mode, func(t *testing.T) {
			rp := newRunParams(t, mode, false)
			killEscapees(t, rp) // without a cgroup the payload's escapee outlives the rehearsal
			log := &syncBuffer{}
			o := rp.options(slog.New(slog.NewTextHandler(log, nil)))
			o.Release.Meta.Image = older
			_, err := Run(context.Background(), o)
			if (mode == "exit") != (err != nil) {
				t.Fatalf("Run(%s) = %v\n%s", mode, err, log)
			}
			said := log.String()
			if err != nil {
				said += err.Error()
			}
			if strings.Contains(said, "new release") {
				t.Errorf("the rehearsal of %s calls it the new release:\n%s", older, said)
			}
			if !strings.Contains(log.String(), "rehearsing the release on a copy of the data") || !strings.Contains(log.String(), older) {
				t.Errorf("the log does not name the release it rehearses (%s):\n%s", older, log)
			}
		})
	}
}
