// SPDX-License-Identifier: Apache-2.0

// Package deploy carries the Docker-host box's files into the hbx binary:
// `hbx box new` writes Compose, verbatim, into each box directory, so a
// box does not depend on a checkout of this repository.
package deploy

import _ "embed"

// Compose is deploy/compose.yaml, the Compose project of one box.
//
//go:embed compose.yaml
var Compose []byte
