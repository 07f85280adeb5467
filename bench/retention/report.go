package retention

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// DynamoItemSize returns the size DynamoDB bills and limits for a completed record of
// dynamostore with the default attribute names ("pk", "ttl", no sort key): per AWS's rules,
// each attribute's name in UTF-8 bytes plus its value (a string or binary: its length; a
// number: 1 byte plus 1 per 2 significant digits). keyLen is the storage key with its prefix,
// response the storekit.EncodeResponse length. Times are 16-digit Unix microseconds, the TTL a
// 10-digit Unix second.
func DynamoItemSize(keyLen, response int) int {
	num := func(digits int) int { return 1 + (digits+1)/2 }
	attrs := []struct {
		name string
		size int
	}{
		{"pk", keyLen},
		{"fingerprint", idem.FingerprintLen},
		{"state", len("completed")},
		{"token", num(16)},
		{"lease_until", num(16)},
		{"attempts", num(1)},
		{"response", response},
		{"created_at", num(16)},
		{"completed_at", num(16)},
		{"expires_at", num(16)},
		{"ttl", num(10)},
	}
	n := 0
	for _, a := range attrs {
		n += len(a.name) + a.size
	}
	return n
}

// WriteSQL writes the results of SQL as Markdown tables, one per engine: each size's rate
// per round and its ratio to the smallest size's rate of the same round, and the median
// ratio.
func WriteSQL(w io.Writer, results []Result) {
	var engines []string
	for _, r := range results {
		if !slices.Contains(engines, r.Engine) {
			engines = append(engines, r.Engine)
		}
	}
	for _, e := range engines {
		var sizes []int
		rounds := 0
		rate := map[[3]int]Result{} // size, path (0 new key, 1 replay), round
		for _, r := range results {
			if r.Engine != e {
				continue
			}
			if !slices.Contains(sizes, r.Size) {
				sizes = append(sizes, r.Size)
			}
			p := 0
			if r.Path == "replay" {
				p = 1
			}
			rate[[3]int{r.Size, p, r.Round}] = r
			rounds = max(rounds, r.Round)
		}
		slices.Sort(sizes)
		fmt.Fprintf(w, "\n### %s\n\n", engineName(e))
		fmt.Fprintf(w, "| path | records in the table | ops/s per round | ratio to %s, per round | median ratio | errors |\n", sizeName(sizes[0]))
		fmt.Fprintf(w, "| --- | ---: | --- | --- | ---: | ---: |\n")
		for p, path := range []string{"new key (Reserve + Complete)", "uncached replay (Reserve)"} {
			for _, size := range sizes {
				var rates, ratios []string
				var rs []float64
				errs := 0
				for round := 1; round <= rounds; round++ {
					r, ok := rate[[3]int{size, p, round}]
					base, okb := rate[[3]int{sizes[0], p, round}]
					if !ok || !okb {
						continue
					}
					errs += r.Errors
					rates = append(rates, fmt.Sprintf("%.0f", r.Rate))
					if base.Rate > 0 {
						rs = append(rs, r.Rate/base.Rate)
						ratios = append(ratios, fmt.Sprintf("%.2f", r.Rate/base.Rate))
					}
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | **%.2f** | %d |\n", path, sizeName(size),
					strings.Join(rates, ", "), strings.Join(ratios, ", "), median(rs), errs)
			}
		}
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func engineName(e string) string {
	switch e {
	case "postgres":
		return "PostgreSQL (pgstore)"
	case "mysql":
		return "MariaDB (mysqlstore)"
	case "sqlite":
		return "SQLite (sqlitestore)"
	}
	return e
}

func sizeName(n int) string {
	if n < minReplayed {
		return fmt.Sprintf("%d (+%s replayed)", n, thousands(minReplayed))
	}
	return thousands(n)
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// WriteRedis writes the results of RedisMemory, with DynamoDB's item size for the same
// records beside them.
func WriteRedis(w io.Writer, rs []RedisResult) {
	fmt.Fprintf(w, "| response body | records | STRLEN of a record | MEMORY USAGE per record (mean of %s) | listing index per record | used_memory change per record | DynamoDB item size (computed) | PTTL of a fresh record |\n", "a sample")
	fmt.Fprintf(w, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rs {
		enc := len(storekit.EncodeResponse(idem.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: make([]byte, r.BodyBytes)}))
		fmt.Fprintf(w, "| %d B | %s | %.0f B | %.0f B (%d sampled) | %.0f B | %.0f B | %d B | %s |\n", r.BodyBytes, thousands(r.Records),
			r.ValueBytes, r.UsageMean, r.Sampled, r.IndexPerRecord, r.UsedDelta, DynamoItemSize(len("idem:")+len(Key(0)), enc), r.TTL.Round(1e9))
	}
}
