// Package pathtrust refuses a path that someone other than the trusted
// users could replace or rewrite, as sshd's StrictModes does for
// ~/.ssh/authorized_keys.
//
// A directory is only as safe as its parents: whoever can write /storage
// can rename /storage/executor-runtime away and put their own in its
// place. [Check] therefore examines the path and every ancestor up to "/",
// resolving symlinks as the kernel does (the directories of every hop are
// checked). Each existing component must be:
//
//   - owned by root or by one of the trusted uids;
//   - not writable by others (mode o+w), and not writable by its group
//     (g+w) unless the group is gid 0 or one of the trusted gids: a group
//     with another gid is counted as holding other users, whoever its
//     members are today (simple, and what /etc/group cannot take back).
//
// A directory owned by root with the sticky bit (such as /tmp, mode 1777)
// is excepted as an ancestor: there, only an entry's owner can rename or
// remove it. It is never excepted as the checked path itself (the error
// then says to use a directory of its own, not to chmod /tmp).
//
// A missing path is checked from its nearest existing ancestor: what hbx
// creates below it is root's. Symlinks themselves carry no permissions
// and are not checked; their directories and their targets are.
//
// A component's POSIX access ACL counts as its mode does: a named user or
// group outside the trusted ones whose entry, within the mask, allows
// write makes it untrusted (with an ACL the group mode bits are only the
// mask, so "setfacl -m u:hermes:rwx /storage" leaves a 0775 root:root
// directory hermes can write).
//
// Not guaranteed: the check is a snapshot (a trusted user can still change
// things later), and default ACLs, capabilities and mount options are not
// examined.
package pathtrust
