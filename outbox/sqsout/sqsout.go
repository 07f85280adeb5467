// Package sqsout publishes outbox events to Amazon SQS: the event's Topic is the queue's URL,
// its key travels in the Idempotency-Key message attribute (which consumer/sqs hands the
// consumer as a header, so outbox.KeyOf reads it), and its other headers as String message
// attributes. On a FIFO queue (a URL ending in ".fifo") the event's order key
// (outbox.Message.OrderKey, or its key when unset) is the message group, so an order key's
// events are delivered in order, and the deduplication id names the outbox row, so that SQS
// drops a relay's second publish of one event within its five-minute window; the consumer's
// idempotency record covers what falls outside it. On a standard queue SQS keeps no order:
// the order key is not sent.
package sqsout

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

// API is the part of the SQS client the publisher uses. *sqs.Client implements it.
type API interface {
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
}

// Publisher is an outbox.Publisher for SQS. Create it with New.
type Publisher struct {
	api    API
	prefix string
}

// New returns a publisher through api. idPrefix starts every FIFO deduplication id (the outbox
// table's name, say), so that events of two outbox tables publishing to one queue never share
// one.
func New(api API, idPrefix string) (*Publisher, error) {
	if api == nil {
		return nil, &idem.OptionError{Package: "sqsout", Field: "api", Problem: "is nil"}
	}
	return &Publisher{api: api, prefix: idPrefix}, nil
}

// maxAttributes is how many message attributes SQS takes on one message.
const maxAttributes = 10

// Publish sends m to the queue whose URL is m.Topic and returns once SQS has stored it. A
// message SQS can never take (more than ten headers, a header name it refuses) is an
// outbox.Permanent error.
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	header := outbox.WithKey(m.Header, m.Key)
	if len(header) > maxAttributes {
		return outbox.Permanent(fmt.Errorf("sqsout: event %d has %d headers with its key; SQS takes at most %d message attributes", m.ID, len(header), maxAttributes))
	}
	names := make([]string, 0, len(header))
	for k := range header {
		names = append(names, k)
	}
	sort.Strings(names)
	attrs := make(map[string]types.MessageAttributeValue, len(header))
	for _, k := range names {
		if len(header[k]) == 0 {
			continue
		}
		if !validName(k) {
			return outbox.Permanent(fmt.Errorf("sqsout: event %d: header %q is not a valid SQS message attribute name", m.ID, k))
		}
		attrs[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(strings.Join(header[k], ","))}
	}
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(m.Topic), MessageBody: aws.String(string(m.Body)), MessageAttributes: attrs}
	if strings.HasSuffix(m.Topic, ".fifo") {
		in.MessageGroupId = aws.String(cmp.Or(m.OrderKey, m.Key))
		in.MessageDeduplicationId = aws.String(dedupID(p.prefix, m.ID))
	}
	_, err := p.api.SendMessage(ctx, in)
	if err != nil {
		return fmt.Errorf("sqsout: %w", err)
	}
	return nil
}

// validName reports whether SQS accepts k as a message attribute name: up to 256 letters,
// digits, '_', '-' and '.', not starting with "AWS." or "Amazon.", no '.' first, last or twice.
func validName(k string) bool {
	if k == "" || len(k) > 256 || k[0] == '.' || k[len(k)-1] == '.' || strings.Contains(k, "..") {
		return false
	}
	low := strings.ToLower(k)
	if strings.HasPrefix(low, "aws.") || strings.HasPrefix(low, "amazon.") {
		return false
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// dedupID is the FIFO deduplication id of an outbox row: at most 128 characters.
func dedupID(prefix string, id int64) string {
	s := prefix + ":" + strconv.FormatInt(id, 10)
	if len(s) > 128 {
		s = s[len(s)-128:]
	}
	return s
}
