package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/redis/go-redis/v9"
)

func init() {
	Register("postgres", openPostgres)
	Register("postgresql", openPostgres)
	Register("mysql", openMySQL)
	Register("redis", openRedis)
	Register("rediss", openRedis)
	Register("redis+cluster", openRedisCluster)
	Register("rediss+cluster", openRedisCluster)
	Register("dynamodb", openDynamoDB)
}

// take removes idem's own parameters from u's query, leaving the driver's.
func take(u *url.URL, names ...string) map[string]string {
	q := u.Query()
	out := map[string]string{}
	for _, n := range names {
		if q.Has(n) {
			out[n] = q.Get(n)
			q.Del(n)
		}
	}
	u.RawQuery = q.Encode()
	return out
}

// migrateFlag reads migrate=true|false (default true: the schema is brought up to date on open).
func migrateFlag(p map[string]string) (bool, error) { return boolParam(p, "migrate", true) }

// boolParam reads the parameter name: true|1|false|0, or def when it is absent.
func boolParam(p map[string]string, name string, def bool) (bool, error) {
	switch v, ok := p[name]; {
	case !ok || v == "":
		return def, nil
	case v == "true" || v == "1":
		return true, nil
	case v == "false" || v == "0":
		return false, nil
	}
	return false, fmt.Errorf("%w: %s=%q is neither true nor false", idem.ErrInvalidInput, name, p[name])
}

// PostgresGroupCommit is pgstore.Options.GroupCommit for postgres:// URLs without a
// group_commit parameter: the gateway groups concurrent claims and completions into shared
// transactions unless told group_commit=0.
const PostgresGroupCommit = 2

// openPostgres opens postgres://user:pass@host:port/db?sslmode=…&table=…&schema=…&migrate=…
// &group_commit=N&partition_width=D&partition_margin=D (pgx parameters such as pool_max_conns
// pass through). The schema is migrated on open unless migrate=false. partition_width (a Go
// duration such as 6h) selects pgstore's partitioned layout, whose Sweep drops whole
// partitions, with group commit as in the plain layout.
func openPostgres(ctx context.Context, u *url.URL) (Store, error) {
	return openPostgresMode(ctx, u, modeParam)
}

// openMode says whether an opener migrates the schema.
type openMode int

const (
	modeParam    openMode = iota // as the URL's migrate parameter says (default: migrate)
	modeDefer                    // neither migrate nor check: the caller migrates (Migrate)
	modeExisting                 // never create or migrate: the table must exist (OpenExisting)
)

// versioner is a SQL store that reports its table's schema version.
type versioner interface {
	Store
	Version(ctx context.Context) (int, error)
	Table() string
}

// migrateOrCheck migrates st, or with mig false checks that its table exists, closing st on
// failure. u names the store in the error.
func migrateOrCheck(ctx context.Context, u *url.URL, st versioner, mode openMode, mig bool) (Store, error) {
	switch {
	case mode == modeDefer:
		return st, nil
	case mode == modeParam && mig:
		if err := st.(interface{ Migrate(context.Context) error }).Migrate(ctx); err != nil {
			st.Close()
			return nil, err
		}
		return st, nil
	}
	v, err := st.Version(ctx)
	if err == nil && v == 0 {
		err = fmt.Errorf("%w at %s (table %s)", ErrNoTable, u.Redacted(), st.Table())
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

func openPostgresMode(ctx context.Context, u *url.URL, mode openMode) (*pgstore.Store, error) {
	c := *u
	p := take(&c, "table", "schema", "migrate", "group_commit", "partition_width", "partition_margin")
	mig, err := migrateFlag(p)
	if err != nil {
		return nil, err
	}
	var width, margin time.Duration
	for name, d := range map[string]*time.Duration{"partition_width": &width, "partition_margin": &margin} {
		if v := p[name]; v != "" {
			if *d, err = time.ParseDuration(v); err != nil {
				return nil, fmt.Errorf("%w: %s=%q is not a duration", idem.ErrInvalidInput, name, v)
			}
		}
	}
	group := PostgresGroupCommit
	if v := p["group_commit"]; v != "" {
		if group, err = strconv.Atoi(v); err != nil || group < 0 {
			return nil, fmt.Errorf("%w: group_commit=%q is not a number of transactions (0 or more)", idem.ErrInvalidInput, v)
		}
	}
	st, err := pgstore.Open(ctx, c.String(), pgstore.Options{Table: p["table"], Schema: p["schema"], GroupCommit: group,
		PartitionWidth: width, PartitionMargin: margin})
	if err != nil {
		return nil, err
	}
	if _, err := migrateOrCheck(ctx, u, st, mode, mig); err != nil {
		return nil, err
	}
	return st, nil
}

// openMySQL opens mysql://user:pass@host:port/db?table=…&migrate=… (go-sql-driver parameters
// pass through).
func openMySQL(ctx context.Context, u *url.URL) (Store, error) {
	return openMySQLMode(ctx, u, modeParam)
}

func openMySQLMode(ctx context.Context, u *url.URL, mode openMode) (*mysqlstore.Store, error) {
	c := *u
	p := take(&c, "table", "migrate")
	mig, err := migrateFlag(p)
	if err != nil {
		return nil, err
	}
	host := c.Host
	if c.Port() == "" {
		host += ":3306"
	}
	dsn := "tcp(" + host + ")" + c.Path
	if c.User != nil {
		dsn = c.User.String() + "@" + dsn
		if pw, ok := c.User.Password(); ok {
			dsn = c.User.Username() + ":" + pw + "@tcp(" + host + ")" + c.Path
		}
	}
	if c.RawQuery != "" {
		dsn += "?" + c.RawQuery
	}
	st, err := mysqlstore.Open(ctx, dsn, mysqlstore.Options{Table: p["table"]})
	if err != nil {
		return nil, err
	}
	if _, err := migrateOrCheck(ctx, u, st, mode, mig); err != nil {
		return nil, err
	}
	return st, nil
}

// redisStore closes the client it opened along with the store.
type redisStore struct {
	*redisstore.Store
	client redis.UniversalClient
}

func (s redisStore) Close() error { return errors.Join(s.Store.Close(), s.client.Close()) }

// openRedis opens redis://[user:pass@]host:port[/db]?prefix=…&autopipeline=true (or rediss://
// for TLS; go-redis parameters such as dial_timeout pass through).
func openRedis(ctx context.Context, u *url.URL) (Store, error) {
	c := *u
	p := take(&c, "prefix", "autopipeline")
	opt, err := redis.ParseURL(c.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", idem.ErrInvalidInput, err)
	}
	opt.ContextTimeoutEnabled = true // calls end at their context's deadline (see redisstore.Options.Client)
	return newRedis(ctx, redis.NewClient(opt), p)
}

// openRedisCluster opens redis+cluster://host1:port,host2:port?prefix=…&autopipeline=true
// (rediss+cluster for TLS).
func openRedisCluster(ctx context.Context, u *url.URL) (Store, error) {
	c := *u
	p := take(&c, "prefix", "autopipeline")
	c.Scheme = strings.TrimSuffix(c.Scheme, "+cluster")
	hosts := strings.Split(c.Host, ",")
	c.Host = hosts[0]
	opt, err := redis.ParseClusterURL(c.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", idem.ErrInvalidInput, err)
	}
	opt.Addrs = hosts
	opt.ContextTimeoutEnabled = true
	return newRedis(ctx, redis.NewClusterClient(opt), p)
}

// newRedis opens the store on client with the parameters p (prefix, autopipeline), closing
// the client if it fails.
func newRedis(ctx context.Context, client redis.UniversalClient, p map[string]string) (Store, error) {
	ap, err := boolParam(p, "autopipeline", false)
	if err != nil {
		client.Close()
		return nil, err
	}
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, err
	}
	st, err := redisstore.New(redisstore.Options{Client: client, Prefix: p["prefix"], AutoPipeline: ap})
	if err != nil {
		client.Close()
		return nil, err
	}
	return redisStore{Store: st, client: client}, nil
}

// openDynamoDB opens dynamodb://TABLE?region=…&endpoint=…&prefix=…&create=true. With endpoint
// (DynamoDB Local, say) static local credentials are used; without, the AWS SDK's default
// configuration (environment, shared config, instance role). create=true creates the table and
// enables TTL if it does not exist.
func openDynamoDB(ctx context.Context, u *url.URL) (Store, error) {
	return openDynamoDBMode(ctx, u, modeParam)
}

// openDynamoDBMode opens dynamodb://; with modeExisting it fails with an error wrapping
// ErrNoTable if the table does not exist, and with modeDefer it ignores create.
func openDynamoDBMode(ctx context.Context, u *url.URL, mode openMode) (*dynamostore.Store, error) {
	table := u.Host
	if table == "" {
		return nil, fmt.Errorf("%w: dynamodb URL has no table (dynamodb://TABLE)", idem.ErrInvalidInput)
	}
	p := newParams(u)
	endpoint, region, prefix, create := p.get("endpoint"), p.get("region"), p.get("prefix"), p.get("create")
	if err := p.done(); err != nil {
		return nil, err
	}
	var client *dynamodb.Client
	if endpoint != "" {
		client = dynamostore.LocalClient(endpoint, nil, func(o *dynamodb.Options) {
			o.Logger = awsLogger{}
			if region != "" {
				o.Region = region
			}
		})
	} else {
		opts := []func(*config.LoadOptions) error{config.WithLogger(awsLogger{})}
		if region != "" {
			opts = append(opts, config.WithRegion(region))
		}
		cfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, err
		}
		client = dynamodb.NewFromConfig(cfg)
	}
	st, err := dynamostore.New(dynamostore.Options{Client: client, Table: table, KeyPrefix: prefix})
	if err != nil {
		return nil, err
	}
	switch {
	case mode == modeExisting:
		ok, err := dynamoTableExists(ctx, st)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w at %s (table %s)", ErrNoTable, u.Redacted(), table)
		}
	case mode == modeParam && (create == "true" || create == "1"):
		if err := st.CreateTable(ctx, dynamostore.TableOptions{}); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// dynamoTableExists reports whether st's table exists.
func dynamoTableExists(ctx context.Context, st *dynamostore.Store) (bool, error) {
	v, err := dynamoTableVersion(ctx, st)
	return v > 0, err
}

// DynamoDBVersion is the version Migrate reports for a DynamoDB table that has every index
// the store uses (dynamostore.ListIndex and dynamostore.NewestIndex); a table without them is
// version 1, and Migrate adds them.
const DynamoDBVersion = 2

// dynamoTableVersion returns the version of st's table: 0 when it does not exist, 1 when it
// lacks an index the store uses, DynamoDBVersion when it has them all.
func dynamoTableVersion(ctx context.Context, st *dynamostore.Store) (int, error) {
	api, ok := st.Options().Client.(dynamostore.TableAPI)
	if !ok {
		return 0, fmt.Errorf("%w: the DynamoDB client cannot describe tables", idem.ErrInvalidInput)
	}
	table := st.Options().Table
	out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
	var nf *types.ResourceNotFoundException
	switch {
	case errors.As(err, &nf):
		return 0, nil
	case err != nil:
		return 0, err
	}
	has := map[string]bool{}
	for _, g := range out.Table.GlobalSecondaryIndexes {
		has[aws.ToString(g.IndexName)] = true
	}
	if has[dynamostore.ListIndex] && has[dynamostore.NewestIndex] {
		return DynamoDBVersion, nil
	}
	return 1, nil
}
