package killpoint

// Env names the point to die at (read only by hbxtest builds).
const Env = "HBXTEST_KILL_AT"

// HoldEnv names a point to hold at and a file: "point=/path/to/file"
// (read only by hbxtest builds).
const HoldEnv = "HBXTEST_HOLD_AT"

// Tag is the build tag that arms At and Hold.
const Tag = "hbxtest"

// Points placed in hbx.
const (
	// BeforeSwitch and AfterSwitch surround the rename that moves the
	// runtime directory's current link (release).
	BeforeSwitch = "runtime-switch-before"
	AfterSwitch  = "runtime-switch-after"
	// BeforePin and AfterPin surround the config file write of a
	// restore's release pin (backup).
	BeforePin = "config-pin-before"
	AfterPin  = "config-pin-after"
	// UpgradeHealthWait is where hbx upgrade has activated the new
	// release, released the hold and starts waiting for its health
	// (journal phase activating; package upgrade).
	UpgradeHealthWait = "upgrade-health-wait"
	// RehearsalReady is where hbx upgrade's rehearsal found the staged
	// release ready on its scratch copy and logged so, before it stops it
	// and removes the copy (package rehearse; journal phase staged): a
	// point for At and Hold.
	RehearsalReady = "rehearsal-ready"
	// SupervisorRecovery is where a running supervisor looks for a
	// release change or restore whose command died (package upgrade),
	// before it resolves it: a point for Hold.
	SupervisorRecovery = "supervisor-recovery"
	// LayersSeeded is where an install has linked a layer state (or an
	// earlier release) into its staging tree, before it applies its own
	// layers; LayerStatePublish is before each rename of a staged layer
	// state into the runtime directory's layers/ (package installer).
	LayersSeeded      = "layers-seeded"
	LayerStatePublish = "layer-state-publish"
)
