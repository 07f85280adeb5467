package idem_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestListedRecord checks the completion of a listed row: an in-progress record is left as
// read, a completed one gets its status and completion time, and an unknown state or an
// unreadable response head is a corrupt record.
func TestListedRecord(t *testing.T) {
	t.Parallel()
	r := idem.Record{Key: "k", State: idem.StateInProgress}
	if err := idem.ListedRecord(&r, nil, 0); err != nil || r.Response != nil || !r.CompletedAt.IsZero() {
		t.Fatalf("in progress: %v %+v", err, r)
	}
	head := idem.EncodeResponse(idem.Response{Status: 201, Body: []byte("a body")})
	if len(head) > idem.ListResponseHeadLen {
		head = head[:idem.ListResponseHeadLen]
	}
	at := time.UnixMicro(1_700_000_000_000_000)
	r = idem.Record{Key: "k", State: idem.StateCompleted}
	if err := idem.ListedRecord(&r, head, at.UnixMicro()); err != nil || r.Response == nil || r.Response.Status != 201 || !r.CompletedAt.Equal(at) {
		t.Fatalf("completed: %v %+v", err, r)
	}
	r = idem.Record{Key: "k", State: idem.State(9)}
	if err := idem.ListedRecord(&r, head, 0); !errors.Is(err, idem.ErrCorruptRecord) {
		t.Errorf("unknown state: %v", err)
	}
	r = idem.Record{Key: "k", State: idem.StateCompleted}
	if err := idem.ListedRecord(&r, []byte{0xff}, 0); err == nil {
		t.Errorf("unreadable head accepted")
	}
}
