package optioncheck_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/amqp"
	"github.com/idemkit/idem/consumer/dynamocheckpoints"
	"github.com/idemkit/idem/consumer/dynamostream"
	"github.com/idemkit/idem/consumer/kafka"
	"github.com/idemkit/idem/consumer/kinesis"
	"github.com/idemkit/idem/consumer/natsjs"
	"github.com/idemkit/idem/consumer/pgcheckpoints"
	"github.com/idemkit/idem/consumer/redisstream"
	consumersqs "github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/gateway"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/amqpout"
	"github.com/idemkit/idem/outbox/kafkaout"
	"github.com/idemkit/idem/outbox/mysqloutbox"
	"github.com/idemkit/idem/outbox/natsout"
	"github.com/idemkit/idem/outbox/pgoutbox"
	"github.com/idemkit/idem/outbox/sqliteoutbox"
	"github.com/idemkit/idem/outbox/sqsout"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/sweeper"
)

// TestInvalidOptionsOneRule walks every constructor with a bad option and checks the one rule:
// errors.Is(err, idem.ErrInvalidInput), the raising package's prefix, the field named, and an
// *idem.OptionError to read them from. (idemfiber, a module of its own, checks itself.)
func TestInvalidOptionsOneRule(t *testing.T) {
	t.Parallel()
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	one := idemhttp.SingleCaller()
	key := func(*consumer.Message) (string, error) { return "k", nil }
	h := func(context.Context, *consumer.Message) ([]byte, error) { return nil, nil }
	lh := func(context.Context, string) (string, error) { return "", nil }
	cases := []struct {
		pkg, field string
		call       func() error
	}{
		{"idem", "Options.Lease", func() error { _, err := idem.New(memstore.New(), idem.Options{Lease: -1}); return err }},
		{"idem", "store", func() error { _, err := idem.New(nil, idem.Options{}); return err }},
		{"idemhttp", "Options.Runner", func() error { _, err := idemhttp.New(idemhttp.Options{Scope: one}); return err }},
		{"idemhttp", "Options.Scope", func() error { _, err := idemhttp.New(idemhttp.Options{Runner: eng}); return err }},
		{"idemhttp", "Options.MaxRequestBody", func() error {
			_, err := idemhttp.New(idemhttp.Options{Runner: eng, Scope: one, MaxRequestBody: -1})
			return err
		}},
		{"idemhttp", "Options.Key", func() error {
			_, err := idemhttp.New(idemhttp.Options{Runner: eng, Scope: one, Key: idemhttp.JSONKey("a..b")})
			return err
		}},
		{"idemgrpc", "ServerOptions.Runner", func() error {
			_, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{Scope: idemgrpc.SingleCaller()})
			return err
		}},
		{"idemgrpc", "ClientOptions.BaseDelay", func() error {
			_, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{BaseDelay: -1})
			return err
		}},
		{"idemlambda", "Options.Runner", func() error { _, err := idemlambda.Wrap(idemlambda.Options{KeyPath: "id"}, lh); return err }},
		{"idemlambda", "handler", func() error {
			_, err := idemlambda.Wrap[string, string](idemlambda.Options{Runner: eng, KeyPath: "id"}, nil)
			return err
		}},
		{"idemlambda", "ProxyOptions.Runner", func() error {
			_, err := idemlambda.WrapHTTPAPI(idemlambda.ProxyOptions{}, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
				return events.APIGatewayV2HTTPResponse{}, nil
			})
			return err
		}},
		{"consumer", "Options.Runner", func() error { _, err := consumer.New(consumer.Options{Key: key}, h); return err }},
		{"consumer", "Options.Key", func() error { _, err := consumer.New(consumer.Options{Runner: eng}, h); return err }},
		{"consumer", "Options.Scope", func() error {
			_, err := consumer.New(consumer.Options{Runner: eng, Key: key, Scope: "a|b"}, h)
			return err
		}},
		{"idemclient", "Options.MaxAttempts", func() error { _, err := idemclient.New(idemclient.Options{MaxAttempts: -1}); return err }},
		{"sweeper", "Options.Batch", func() error { _, err := sweeper.Start(memstore.New(), sweeper.Options{Batch: -1}); return err }},
		{"sweeper", "st", func() error { _, err := sweeper.Drain(context.Background(), nil, sweeper.Options{}); return err }},
		{"outbox", "RelayOptions.Batch", func() error {
			_, err := outbox.NewRelay(&pgoutbox.Store{}, outbox.PublisherFunc(func(context.Context, outbox.Message) error { return nil }), outbox.RelayOptions{Batch: -1})
			return err
		}},
		{"outbox", "pub", func() error { _, err := outbox.NewRelay(&pgoutbox.Store{}, nil, outbox.RelayOptions{}); return err }},
		{"pgoutbox", "db", func() error { _, err := pgoutbox.New(nil, pgoutbox.Options{}); return err }},
		{"mysqloutbox", "Options.Table", func() error { _, err := mysqloutbox.New(&sql.DB{}, mysqloutbox.Options{Table: "a-b"}); return err }},
		{"sqliteoutbox", "db", func() error { _, err := sqliteoutbox.New(nil, sqliteoutbox.Options{}); return err }},
		{"sqsout", "api", func() error { _, err := sqsout.New(nil, ""); return err }},
		{"kafkaout", "cl", func() error { _, err := kafkaout.New(nil); return err }},
		{"kinesis", "Options.LeaseDuration", func() error {
			c, _ := consumer.New(consumer.Options{Runner: eng, Key: key}, h)
			_, err := kinesis.Start(context.Background(), c, kinesis.Options{Client: &awskinesis.Client{}, Stream: "s", LeaseDuration: -1})
			return err
		}},
		{"dynamostream", "Options.StreamARN", func() error {
			c, _ := consumer.New(consumer.Options{Runner: eng, Key: key}, h)
			_, err := dynamostream.Start(context.Background(), c, dynamostream.Options{Client: &dynamodbstreams.Client{}})
			return err
		}},
		{"amqp", "channel", func() error {
			c, _ := consumer.New(consumer.Options{Runner: eng, Key: key}, h)
			return amqp.Run(context.Background(), nil, "q", c, amqp.Options{})
		}},
		{"kafka", "consumer", func() error { _, err := kafka.NewWorker(nil, kafka.Options{}); return err }},
		{"natsjs", "Options.Concurrency", func() error {
			c, _ := consumer.New(consumer.Options{Runner: eng, Key: key}, h)
			_, err := natsjs.Handler(context.Background(), c, natsjs.Options{Concurrency: -1})
			return err
		}},
		{"redisstream", "client", func() error {
			c, _ := consumer.New(consumer.Options{Runner: eng, Key: key}, h)
			_, err := redisstream.NewWorker(nil, c, redisstream.Options{Stream: "s", Group: "g"})
			return err
		}},
		{"sqs", "WorkerOptions.QueueURL", func() error {
			c, _ := consumer.New(consumer.Options{Runner: eng, Key: key}, h)
			_, err := consumersqs.NewWorker(&awssqs.Client{}, c, consumersqs.WorkerOptions{})
			return err
		}},
		{"sqs", "consumer", func() error { _, err := consumersqs.LambdaHandler(nil, consumersqs.LambdaOptions{}); return err }},
		{"memstore", "Options.MaxBytes", func() error { _, err := memstore.NewBounded(memstore.Options{MaxBytes: -1}); return err }},
		{"pgstore", "Options.Table", func() error { _, err := pgstore.New(&pgxpool.Pool{}, pgstore.Options{Table: "a-b"}); return err }},
		{"mysqlstore", "db", func() error { _, err := mysqlstore.New(nil, mysqlstore.Options{}); return err }},
		{"sqlitestore", "Options.Readers", func() error {
			_, err := sqlitestore.Open(context.Background(), ":memory:", sqlitestore.Options{Readers: -1})
			return err
		}},
		{"redisstore", "Options.Client", func() error { _, err := redisstore.New(redisstore.Options{}); return err }},
		{"dynamostore", "Options.Table", func() error { _, err := dynamostore.New(dynamostore.Options{Client: &dynamodb.Client{}}); return err }},
		{"pgcheckpoints", "db", func() error { _, err := pgcheckpoints.New(nil, pgcheckpoints.Options{Application: "a"}); return err }},
		{"dynamocheckpoints", "Options.Application", func() error {
			_, err := dynamocheckpoints.New(dynamocheckpoints.Options{Client: &dynamodb.Client{}, Table: "t"})
			return err
		}},
		{"natsout", "js", func() error { _, err := natsout.New(nil, "t"); return err }},
		{"amqpout", "ch", func() error { _, err := amqpout.New(nil, ""); return err }},
		{"gateway", "upstream", func() error {
			return gateway.Config{Scope: gateway.ScopeNone}.WithDefaults().Validate()
		}},
		{"gateway", "lease", func() error {
			return gateway.Config{Upstream: "http://x", Scope: gateway.ScopeNone, Lease: gateway.Duration(1)}.WithDefaults().Validate()
		}},
	}
	for _, tc := range cases {
		err := tc.call()
		want := tc.pkg + ": invalid options: " + tc.field + " "
		if !errors.Is(err, idem.ErrInvalidInput) || err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s %s: err %v, want one matching idem.ErrInvalidInput starting %q", tc.pkg, tc.field, err, want)
			continue
		}
		var oe *idem.OptionError
		if !errors.As(err, &oe) || oe.Package != tc.pkg || oe.Field != tc.field {
			t.Errorf("%s %s: %#v, want an *idem.OptionError for that package and field", tc.pkg, tc.field, oe)
		}
	}
}
