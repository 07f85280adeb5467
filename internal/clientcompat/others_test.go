package clientcompat_test

import "testing"

func otherClients(t *testing.T) []client { return nil }
