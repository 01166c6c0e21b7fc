// Package progcgroup names the cgroups hbx's supervisor runs its programs
// in and reads their members, for every part of hbx that must decide
// whether a process belongs to a program (the supervisor's stops and
// leftovers, readiness locks, hbx health's listeners).
//
// A program cgroup is a cgroup v2 directory <tree>/<program> whose parent
// is named "hbx.<12 hex digits>" (Subtree); the supervisor creates it below
// its own cgroup and starts the program into it (CLONE_INTO_CGROUP), so
// every process the program starts is a member whatever it does (a new
// session, its descriptors closed), unless root moves it out.
//
// # What it does not do
//
//   - It never creates, removes or signals anything: the supervisor does.
//   - A process in no program cgroup (no cgroup v2 hierarchy, a Docker
//     container's read-only one, a process namespace whose cgroup paths
//     are relative to another root) has no members here: callers fall
//     back to the process tree, process group and hbx's markers.
package progcgroup
