package procstat

import (
	"errors"
	"os"
	"testing"
)

func TestSelf(t *testing.T) {
	t.Parallel()
	if _, err := CPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	m, err := Mem(os.Getpid())
	if err != nil || m.RSS <= 0 || m.PeakRSS < m.RSS {
		t.Fatalf("Mem = %+v, %v", m, err)
	}
}

func TestMissingProcess(t *testing.T) {
	t.Parallel()
	if _, err := CPU(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CPU of a missing process: %v", err)
	}
	if _, err := Mem(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Mem of a missing process: %v", err)
	}
}
