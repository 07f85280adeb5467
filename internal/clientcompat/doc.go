// Package clientcompat holds the tests that run widely used retrying HTTP clients (idemclient,
// hashicorp/go-retryablehttp, Python requests with urllib3's Retry, Node fetch, curl) through
// the idem gateway with network faults, and checks that the configurations shown in
// docs/clients.md give one effect per intent and faithful replays. It has no code of its own:
// its snippets live in testdata and in its test files, and docs/clients.md quotes them.
package clientcompat
