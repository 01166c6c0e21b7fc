package upgrade

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/hermesbox/hbx/internal/journal"
	"github.com/hermesbox/hbx/release"
)

// JournalFile is the upgrade journal's name in the runtime directory.
const JournalFile = "upgrade.json"

// Phase is the step an upgrade or rollback reached.
type Phase string

// The phases, in the order they are recorded.
const (
	PhaseStaged      Phase = "staged"       // the new release is published; nothing live changed
	PhaseBackedUp    Phase = "backed-up"    // the pre-upgrade archive is durable
	PhaseActivating  Phase = "activating"   // config and current are moving to the new release
	PhaseDone        Phase = "done"         // the new release is active and was healthy
	PhaseAborted     Phase = "aborted"      // stopped before anything live changed
	PhaseRollingBack Phase = "rolling-back" // the old release and data are being put back
	PhaseRolledBack  Phase = "rolled-back"  // the old release and data are back
)

// Release names one installed release.
type Release struct {
	// Target is the release (release.Target's JSON fields: image,
	// index_digest, platform, manifest_digest); its String and Equal
	// name and compare releases.
	release.Target
	// MCPTools is the MCP tool set pinned with the release
	// (health.mcp_tools in the config file); nil when not recorded
	// (journals of earlier versions, a release read from disk): Pin then
	// leaves the config file's tool set as it is.
	MCPTools *Tools `json:"mcp_tools,omitempty"`
}

// Tools is the MCP tool set pinned with a release.
type Tools struct {
	// Names are the tool names; nil when the config file does not set
	// health.mcp_tools (its default applies).
	Names []string `json:"names"`
}

// Journal is upgrade.json (internal/journal's shape: "format" first).
type Journal struct {
	journal.Header
	Phase   Phase     `json:"phase"`
	Old     Release   `json:"old"`
	New     Release   `json:"new"`
	Backup  string    `json:"backup,omitempty"` // the pre-upgrade archive
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	// Error is why it was rolled back or aborted: the failure, "hbx
	// rollback" when that command undid it (kept when a recovery finishes
	// a rollback that was under way), "interrupted during <phase>" when a
	// recovery undid a change whose command died.
	Error string `json:"error,omitempty"`
	// KeptAside is where a rollback put the data it replaced: the data the
	// release rolled back from ran on.
	KeptAside string `json:"kept_aside,omitempty"`
	// RollingBackSince is when the rollback under way (phase
	// rolling-back) began, kept by a recovery that does it again: the
	// rolled-back copies stamped since are its own, made by an attempt a
	// kill cut short after its restore committed, and its prune keeps
	// them (keepRolledBack). Zero otherwise.
	RollingBackSince time.Time `json:"rolling_back_since,omitzero"`
	// By is the command that made the change: "" for hbx upgrade,
	// ByInstall for hbx install.
	By string `json:"by,omitempty"`
	// Prior is the journal of the completed upgrade before this one, put
	// back when this one aborts before activation and kept when it is
	// rolled back by itself or by a recovery (carried into the next
	// change), so `hbx rollback` still finds it; never one that hbx
	// rollback undid.
	Prior *Journal `json:"prior,omitempty"`
	// ClosedNext, on the journal of a completed change that a recovery
	// put back (closing the change after it, interrupted before
	// activation: recoverJournal), describes that change: hbx rollback
	// then refuses to undo this one, as after a recovery's rollback (the
	// rollback asked for may have been the closed one, whichever of the
	// supervisor and hbx rollback closed it first). Not carried into the
	// next change.
	ClosedNext string `json:"closed_next,omitempty"`
	// Recovered is set when the rollback was the recovery of a change
	// whose command died (Recover), not one the operator asked for.
	Recovered bool `json:"recovered,omitempty"`
	// Previous is what the previous link named when the change began,
	// recorded before anything moved it; a rollback of the unfinished
	// change (its own after a failure, or Recover's) points previous back
	// there, so the failed release, not the older good one, is what the
	// prune removes. nil when not recorded (journals of earlier hbx, and
	// hbx rollback of a completed change, which leaves previous at the
	// release it rolls back from).
	Previous *PreviousRecord `json:"previous,omitempty"`
}

// PreviousRecord is the release the previous link named (Journal.Previous).
type PreviousRecord struct {
	// Release is that release; nil when there was no previous.
	Release *Release `json:"release"`
}

// Pending reports whether j records a change that is not finished
// (staged, backed-up, activating, rolling-back): a process that holds the
// runtime directory's lock is making it, or its command died.
func (j *Journal) Pending() bool { return pending(j.Phase) }

// Describe says what j records, for messages: "release change (hbx
// upgrade) from A to B was interrupted during activation at T".
func (j *Journal) Describe() string { return j.describe() }

// close records that the upgrade stopped before activation: the prior
// completed upgrade's journal comes back, or the phase becomes aborted.
func (j *Journal) close(runtimeDir, why string, now time.Time) error {
	if j.Prior != nil {
		return j.Prior.write(runtimeDir, j.Prior.Phase, j.Prior.Updated)
	}
	j.Error = why
	return j.write(runtimeDir, PhaseAborted, now)
}

func journalPath(runtimeDir string) string { return filepath.Join(runtimeDir, JournalFile) }

// journalFormat is the upgrade journal's format; journals of hbx
// releases before the format key existed are read as it.
const journalFormat = 1

// journalFile is the upgrade journal of runtimeDir.
func journalFile(runtimeDir string) journal.File {
	return journal.File{Path: journalPath(runtimeDir), What: "upgrade journal", Format: journalFormat, Unversioned: true,
		Fix: "move it away once the active release (hbx status) and the data directory are checked by hand"}
}

// ReadJournal reads the journal of runtimeDir; nil, nil when there is none.
// A journal of an unknown format is refused (journal.ErrFormat).
func ReadJournal(runtimeDir string) (*Journal, error) {
	var j Journal
	ok, err := journalFile(runtimeDir).Read(&j)
	if err != nil || !ok {
		return nil, err
	}
	return &j, nil
}

// write records j durably with phase p.
func (j *Journal) write(runtimeDir string, p Phase, now time.Time) error {
	j.Phase, j.Updated = p, now.UTC()
	return journalFile(runtimeDir).Write(j)
}

// describe says what j records, for messages: "upgrade (hbx upgrade)
// from A to B, rolled back at T".
func (j *Journal) describe() string { return j.describeOld("") }

// describeActiveOld is describe for a change whose old release is the
// active one: it says so beside that release instead of a refusal naming
// the same release twice.
func (j *Journal) describeActiveOld() string { return j.describeOld(" (the active release)") }

// describeOld is describe with oldNote after the old release.
func (j *Journal) describeOld(oldNote string) string {
	by := "hbx upgrade"
	if j.By != "" {
		by = j.By
	}
	what := map[Phase]string{
		PhaseDone:        "completed",
		PhaseRolledBack:  "was rolled back",
		PhaseAborted:     "was stopped before activation",
		PhaseStaged:      "was interrupted after staging",
		PhaseBackedUp:    "was interrupted after its backup",
		PhaseActivating:  "was interrupted during activation",
		PhaseRollingBack: "was interrupted while rolling back",
	}[j.Phase]
	if what == "" {
		what = "is in phase " + string(j.Phase)
	}
	return fmt.Sprintf("release change (%s) from %s%s to %s %s at %s", by, j.Old.Image, oldNote, j.New.Image, what, j.Updated.Format(time.RFC3339))
}
