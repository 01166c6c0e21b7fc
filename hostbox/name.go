// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every refusal of bad input (a name, a port, a
// variable, an existing box): nothing was created.
var ErrInvalid = errors.New("invalid box input")

// maxName is a DNS label's limit (RFC 1035 section 2.3.4).
const maxName = 63

// ValidateName accepts a box name that is a DNS label in lower case
// (RFC 1123: 1 to 63 of a-z, 0-9 and '-', not starting or ending with
// '-'): it names the Compose project hbx-<name>, its containers and
// volumes, and the box directory. Errors wrap ErrInvalid.
func ValidateName(name string) error {
	if name == "" || len(name) > maxName {
		return fmt.Errorf("box name %q: want 1 to %d characters (a DNS label): %w", name, maxName, ErrInvalid)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i != 0 && i != len(name)-1:
		default:
			return fmt.Errorf("box name %q: want a DNS label (a-z, 0-9 and '-', not at either end): %w", name, ErrInvalid)
		}
	}
	return nil
}
