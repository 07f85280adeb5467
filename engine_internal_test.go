package idem

import (
	"testing"
	"time"
)

// The zero Options get the defaults their documentation states.
func TestOptionDefaults(t *testing.T) {
	e, err := New(nopStore{}, Options{CacheSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	o := e.opt
	if o.Lease != 30*time.Second || o.TTL != 24*time.Hour || o.Heartbeat != 10*time.Second ||
		o.PollInterval != 20*time.Millisecond || o.StoreTimeout != 10*time.Second || e.cache.maxBytes != 64<<20 {
		t.Fatalf("defaults: lease %s, TTL %s, heartbeat %s, poll %s, store timeout %s, cache bytes %d",
			o.Lease, o.TTL, o.Heartbeat, o.PollInterval, o.StoreTimeout, e.cache.maxBytes)
	}
}

// nopStore is a Store that New accepts; these tests never call it.
type nopStore struct{ Store }
