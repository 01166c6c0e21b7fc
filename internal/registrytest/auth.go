// SPDX-License-Identifier: Apache-2.0

package registrytest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/crypto/bcrypt"
)

// HtpasswdLine returns the htpasswd entry "user:<bcrypt hash>" for the
// registry's htpasswd authentication (it accepts bcrypt entries only). It
// uses bcrypt's minimum cost: the password protects a test registry.
func HtpasswdLine(user, password string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		return "", fmt.Errorf("hash password of %q: %w", user, err)
	}
	return user + ":" + string(h), nil
}

// WriteAuthFile writes a containers auth.json at path, mode 0600, holding
// user and password for host ("127.0.0.1:5000"):
// {"auths": {"<host>": {"auth": "<base64 user:password>"}}}.
func WriteAuthFile(path, host, user, password string) error {
	b, err := json.Marshal(map[string]any{
		"auths": map[string]any{
			host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + password))},
		},
	})
	if err != nil {
		return fmt.Errorf("encode auth file: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write auth file: %w", err)
	}
	return nil
}
