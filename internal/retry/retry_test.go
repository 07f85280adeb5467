package retry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/retry"
)

func TestInitDefaultsAndChecks(t *testing.T) {
	s := retry.Schedule{}
	if err := s.Init("pkg", "Options"); err != nil {
		t.Fatal(err)
	}
	if s.MaxAttempts != 5 || s.BaseDelay != 100*time.Millisecond || s.MaxDelay != 5*time.Second || s.MaxElapsed != 30*time.Second {
		t.Fatalf("defaults %+v", s)
	}
	for _, tc := range []struct {
		s    retry.Schedule
		want string
	}{
		{retry.Schedule{MaxAttempts: -1}, "X.MaxAttempts -1 is below 1"},
		{retry.Schedule{BaseDelay: -1}, "X.BaseDelay -1ns is negative"},
		{retry.Schedule{BaseDelay: time.Second, MaxDelay: time.Millisecond}, "X.MaxDelay 1ms is below X.BaseDelay 1s"},
		{retry.Schedule{MaxElapsed: -1}, "X.MaxElapsed -1ns is negative"},
		{retry.Schedule{AttemptTimeout: -1}, "X.AttemptTimeout -1ns is negative"},
	} {
		if err := tc.s.Init("pkg", "X"); !errors.Is(err, idem.ErrInvalidInput) || !strings.HasPrefix(err.Error(), "pkg: invalid options: X.") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Init(%+v) = %v, want %q", tc.s, err, tc.want)
		}
	}
}

func TestBackoffCeilingDoublesToMaxDelay(t *testing.T) {
	s := retry.Schedule{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	top := func(n int64) int64 { return n - 1 }
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 64: time.Second} {
		if got := s.Backoff(attempt, top); got != want {
			t.Errorf("Backoff(%d) top = %s, want %s", attempt, got, want)
		}
	}
	if got := s.Backoff(3, func(int64) int64 { return 0 }); got != 0 {
		t.Errorf("Backoff bottom = %s, want 0", got)
	}
}

func TestWindowReservesTheLastAttempt(t *testing.T) {
	now := time.Unix(1000, 0)
	s := retry.Schedule{MaxElapsed: 10 * time.Second}
	w := s.Window(context.Background(), now)
	if w.Deadline != now.Add(10*time.Second) || w.LastUseful != now.Add(9*time.Second) {
		t.Fatalf("no AttemptTimeout: %+v", w)
	}
	s.AttemptTimeout = 2 * time.Second
	if w = s.Window(context.Background(), now); w.LastUseful != now.Add(8*time.Second) {
		t.Fatalf("AttemptTimeout 2s: %+v", w)
	}
	s.AttemptTimeout = 20 * time.Second // at most half the budget
	if w = s.Window(context.Background(), now); w.LastUseful != now.Add(5*time.Second) {
		t.Fatalf("AttemptTimeout past half: %+v", w)
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(4*time.Second))
	defer cancel()
	s.AttemptTimeout = 0
	if w = s.Window(ctx, now); w.Deadline != now.Add(4*time.Second) {
		t.Fatalf("earlier context deadline: %+v", w)
	}
}

func TestPauseCutShortToLastUseful(t *testing.T) {
	now := time.Unix(1000, 0)
	w := retry.Window{Start: now, Deadline: now.Add(10 * time.Second), LastUseful: now.Add(9 * time.Second)}
	if d, ok := w.Pause(now, time.Second, 3*time.Second); !ok || d != 3*time.Second {
		t.Errorf("server wait longer than backoff: %s %v", d, ok)
	}
	if d, ok := w.Pause(now.Add(8*time.Second), 5*time.Second, 0); !ok || d != time.Second {
		t.Errorf("cut short: %s %v", d, ok)
	}
	if _, ok := w.Pause(now.Add(9*time.Second), 0, 0); ok {
		t.Error("at the last useful moment: another attempt allowed")
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := retry.Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep on a done context = %v", err)
	}
	if err := retry.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
