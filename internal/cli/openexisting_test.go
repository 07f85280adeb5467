package cli

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/storeurl"
)

// readOnly are the commands that read or repair records: none may create a store.
var readOnly = [][]string{
	{"list"},
	{"inspect", "--scope", "none", "k"},
	{"release", "--scope", "none", "k"},
	{"sweep"},
}

// checkNoTable runs every read-only command on store, which names no existing table, and wants
// each to fail with "no idem table at" and the store's URL, and created() to stay false.
func checkNoTable(t *testing.T, store string, created func() bool) {
	t.Helper()
	for _, args := range readOnly {
		code, out, errs := run(t, append(args, "--store", store)...)
		if code != 1 || out != "" || !strings.Contains(errs, "no idem table at ") {
			t.Errorf("idem %s on a store with no table: %d %q %q, want exit 1 and \"no idem table at …\"", args[0], code, out, errs)
		}
		if created() {
			t.Fatalf("idem %s --store %s created the store", args[0], store)
		}
	}
	_, err := storeurl.OpenExisting(context.Background(), store)
	if !errors.Is(err, storeurl.ErrNoTable) {
		t.Errorf("OpenExisting(%s) = %v, want an error matching storeurl.ErrNoTable", store, err)
	}
}

// In an empty folder, list, inspect, release and sweep on the default store create no
// ./idem.db.
func TestReadOnlyCommandsCreateNoSQLiteFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	exists := func() bool {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return len(ents) > 0
	}
	checkNoTable(t, defaultStore, exists)
	checkNoTable(t, "sqlite://"+filepath.Join(dir, "sub.db"), exists)
	// A file with another table: a mistyped ?table= creates no table in it.
	if code, _, errs := run(t, "migrate", "--store", defaultStore); code != 0 {
		t.Fatal(errs)
	}
	s := sqliteStoreAt(filepath.Join(dir, "idem.db"))
	checkNoTable(t, defaultStore+"?table=idem_recrods", func() bool { return s.exist(t, "idem_recrods") })
}

// A mistyped schema or table on PostgreSQL and MariaDB creates neither.
func TestReadOnlyCommandsCreateNoSQLTable(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		s := postgresStore(t)
		pool, err := pgxpool.New(context.Background(), testenv.PostgresURL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		schema := newTable("idem_cli_typo")
		schemaExists := func() bool {
			var ok bool
			if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			return ok
		}
		checkNoTable(t, s.url("idem_records")+"&schema="+schema, schemaExists)
		table := newTable("idem_cli_typo")
		checkNoTable(t, s.url(table), func() bool { return s.exist(t, table) })
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		s := mysqlStore(t)
		table := newTable("idem_cli_typo")
		checkNoTable(t, s.url(table), func() bool { return s.exist(t, table) })
	})
}

// On DynamoDB an absent table is the same error, and is not created.
func TestReadOnlyCommandsCreateNoDynamoDBTable(t *testing.T) {
	t.Parallel()
	ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
	table := newTable("idemcli_typo")
	client := dynamostore.LocalClient(ep, nil)
	exists := func() bool {
		_, err := client.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	}
	t.Cleanup(func() {
		if exists() {
			_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
		}
	})
	checkNoTable(t, "dynamodb://"+table+"?create=true&endpoint="+url.QueryEscape(ep), exists)
}
