// Package boundary holds no code: its test keeps the layers of the module
// apart so no one has to watch them.
//
// The verb packages (installer, supervisor, health, backup, upgrade,
// launch) each do one job and never import one another, test files
// included: cmd/hbx and the composers wire them together. The shared
// layers they build on (release, extract and every package under
// internal/) import no verb
// package, so no verb reaches another through them, except the composers
// (the test's list, top-down: internal/supervise, hbx supervise's
// start-up; internal/guardedinstall, an install under existing data;
// internal/adapters, the adapters between verbs; internal/verbopts,
// configuration to each verb's options; internal/executorrun, the executor's launch; internal/pending,
// what a half-done change means for hbx status and health;
// internal/programname, program names checked against the supervisor's;
// internal/supervisorclient, the running supervisor's client for the
// commands), which only cmd/, e2e/ and a composer above them
// import. Only cmd/, e2e/ and the composers import verbs. The test reads the import lines of every .go file with
// go/parser, whatever its build tags (testenv.GoFiles lists them).
//
// The product (what cmd/hbx links under the Makefile's build tags, read
// with go/build) links no test-only package (testenv, registrytest,
// tartest, testimage, benchimage, bench), and its one package of test
// hooks, internal/killpoint, imports nothing there: its kill and hold
// points are armed only by the build tag hbxtest of the e2e build.
//
// The names beside a data directory (its lock, the restore's journal and
// staging, the pre-restore and rolled-back copies) are spelled only in
// internal/datadir: no other product code holds a string literal that
// starts like one.
package boundary
