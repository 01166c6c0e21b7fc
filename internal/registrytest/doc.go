// SPDX-License-Identifier: Apache-2.0

// Package registrytest puts the real registry (see package testenv) in the
// conditions hbx meets on real networks, for tests:
//
//   - [Proxy]: an HTTP proxy on 127.0.0.1 in front of the registry that
//     passes requests through untouched except those a [Rule] selects,
//     whose responses it stalls, resets, cuts short, answers with a status,
//     drips slowly, or replaces with other bytes (a registry that lies).
//   - [TokenIssuer]: a token endpoint handing out anonymous pull tokens the
//     way ghcr.io does, JWTs signed with an ECDSA key whose self-signed
//     certificate it writes as the registry's rootcertbundle. The key and
//     certificate are made at run time and never leave the test's
//     temporary directory.
//   - [HtpasswdLine] and [WriteAuthFile]: the registry's htpasswd entry
//     (bcrypt) and the matching containers auth.json for hbx.
//   - [WriteTLS]: a private CA and a server certificate it signs, for a
//     registry that speaks HTTPS with its own CA (registry.certs_dir).
//   - [NewImage] and [Image.Push]: a small multi-platform OCI image built
//     in memory and pushed with the distribution API, for tests that need
//     an image other than package testimage's (which carries the real Bun).
//
// It is test tooling: it trusts its inputs, holds whole images in memory,
// and is not hardened against anything.
package registrytest
