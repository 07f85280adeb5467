package console

import "fmt"

// MinSecretLen is the shortest token or password the console accepts, in bytes.
const MinSecretLen = 16

// MinSecretVariety is the fewest distinct bytes a token or password must have: a repeated
// character or a short pattern (aaaaaaaaaaaaaaaa, abababababababab) is refused.
const MinSecretVariety = 8

// CheckSecret returns an error saying why s is too weak to guard the console — empty, shorter
// than MinSecretLen bytes, or with fewer than MinSecretVariety distinct bytes — or nil. A
// token from `openssl rand -hex 16` passes.
func CheckSecret(s string) error {
	if len(s) < MinSecretLen {
		return fmt.Errorf("has %d bytes, fewer than %d (use a random one, such as the output of openssl rand -hex 16)", len(s), MinSecretLen)
	}
	var seen [256]bool
	n := 0
	for i := 0; i < len(s); i++ {
		if !seen[s[i]] {
			seen[s[i]] = true
			n++
		}
	}
	if n < MinSecretVariety {
		return fmt.Errorf("has %d distinct characters, fewer than %d (use a random one, such as the output of openssl rand -hex 16)", n, MinSecretVariety)
	}
	return nil
}
