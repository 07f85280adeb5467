package retention_test

import (
	"fmt"

	"github.com/idemkit/idem/bench/retention"
)

// Keys look like a gateway's storage keys: a scope, a colon, a UUID-shaped key.
func ExampleKey() {
	k := retention.Key(3 * 1000003)
	fmt.Println(k, len(k))
	// Output: 3f9a1c7e5b2d4068:00000000002dc6c9-8b3e-4f21-a6d0-5c7e9f1b2a34 61
}

// A completed record with a 200-byte response encoding, under a 66-byte partition key.
func ExampleDynamoItemSize() {
	fmt.Println(retention.DynamoItemSize(66, 200))
	// Output: 477
}
