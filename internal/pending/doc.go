// Package pending says what a half-done release change or restore means
// for the commands that report on the box: Change reads the upgrade
// journal (upgrade.json), the restore journal (<data_dir>.restore.json)
// and backup.AwaitedRuntime and returns a *ChangeError naming what is not
// finished and what to run; hbx health's release check and hbx status fail
// with it (exit 3). Status is hbx status against a running supervisor (the
// programs asked about, checked with internal/programname, then the
// pending change or a recovery's note); NoSupervisorStatus is its error
// when none answers.
//
// It reads the journals and changes nothing on disk, and prints nothing on
// its own: Status writes its one note to the writer it is given. It is a
// composer (it imports backup, upgrade and supervisor; internal/boundary's
// test names it): only cmd/, e2e/ and another composer import it.
package pending
