package idemotel_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/sqliteoutbox"
)

// lagGauge collects the metrics and returns idem.outbox.lag's points.
func lagGauge(t *testing.T, reader *sdkmetric.ManualReader) []metricdata.DataPoint[float64] {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "idem.outbox.lag" {
				if m.Unit != "s" {
					t.Errorf("unit %q, want s", m.Unit)
				}
				return m.Data.(metricdata.Gauge[float64]).DataPoints
			}
		}
	}
	return nil
}

// The outbox's lag is a gauge users get by registering it: the age of the oldest unpublished
// event on a real SQLite outbox, 0 once a relay has published it, nothing after Unregister.
func TestOutboxLag(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "outbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := sqliteoutbox.Migrate(ctx, db, sqliteoutbox.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := sqliteoutbox.New(db, sqliteoutbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(st, outbox.PublisherFunc(func(context.Context, outbox.Message) error { return nil }), outbox.RelayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	reg, err := idemotel.OutboxLag(relay, "idem_outbox", idemotel.Options{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	if err := sqliteoutbox.Add(ctx, db, sqliteoutbox.Options{}, outbox.Message{Key: "k", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	pts := lagGauge(t, reader)
	if len(pts) != 1 || pts[0].Value < 0.05 || pts[0].Value > 60 {
		t.Fatalf("lag with an event 100ms old: %+v, want one point of about 0.1s", pts)
	}
	if v, ok := pts[0].Attributes.Value(idemotel.AttrOutbox); !ok || v.AsString() != "idem_outbox" {
		t.Errorf("attributes %v, want idem.outbox=idem_outbox", pts[0].Attributes)
	}
	if _, err := relay.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if pts := lagGauge(t, reader); len(pts) != 1 || pts[0].Value != 0 {
		t.Fatalf("lag once published: %+v, want 0", pts)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if pts := lagGauge(t, reader); len(pts) != 0 {
		t.Fatalf("after Unregister: %+v, want no point", pts)
	}
	if _, err := idemotel.OutboxLag(nil, "x", idemotel.Options{MeterProvider: mp}); err == nil {
		t.Error("a nil Lagger was accepted")
	}
	// A failing read reports no value, and the collection says why.
	failing := lagFunc(func(context.Context) (time.Duration, error) { return 0, errors.New("database down") })
	if _, err := idemotel.OutboxLag(failing, "down", idemotel.Options{MeterProvider: mp}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err == nil {
		t.Error("a failing lag read was not reported by the collection")
	}
}

type lagFunc func(context.Context) (time.Duration, error)

func (f lagFunc) Lag(ctx context.Context) (time.Duration, error) { return f(ctx) }
