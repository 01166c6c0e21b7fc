// Package releasetest writes stand-in releases for tests of the packages
// that read a runtime directory's releases (as net/http/httptest serves
// stand-in servers): only their release.json and an empty rootfs.
//
// It guarantees nothing about a release beyond what release.Open reads:
// no layers, no files.json, no program to run.
package releasetest
