// Package sqsout publishes outbox events to Amazon SQS: the event's Topic is the queue's URL,
// its key travels in the Idempotency-Key message attribute (which consumer/sqs hands the
// consumer as a header, so outbox.KeyOf reads it), and its other headers as String message
// attributes. On a FIFO queue (a URL ending in ".fifo") the event's order key
// (outbox.Message.OrderKey, or its key when unset) names the message group, so an order key's
// events are delivered in order (an order key SQS would refuse as a group id, over 128
// characters or with a space or a character outside ASCII, is sent as "sha256:" and its hash
// in hex), and the deduplication id names the outbox row, so that SQS
// drops a relay's second publish of one event within its five-minute window; the consumer's
// idempotency record covers what falls outside it. On a standard queue SQS keeps no order:
// the order key is not sent.
package sqsout

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

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
// message SQS can never take (more than ten headers, a header name it refuses, a body, key or
// header value with characters outside those SQS allows in text, such as NUL or invalid
// UTF-8) is an outbox.Permanent error: encode binary bodies (base64) before adding them.
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	if !validText(string(m.Body)) {
		return outbox.Permanent(fmt.Errorf("sqsout: event %d: the body has characters SQS refuses in a message (only tab, newline, carriage return, and valid UTF-8 from U+0020 up, surrogates and U+FFFE/U+FFFF excluded)", m.ID))
	}
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
		v := strings.Join(header[k], ",")
		if !validText(v) {
			return outbox.Permanent(fmt.Errorf("sqsout: event %d: header %q has characters SQS refuses in a message attribute", m.ID, k))
		}
		attrs[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(m.Topic), MessageBody: aws.String(string(m.Body)), MessageAttributes: attrs}
	if strings.HasSuffix(m.Topic, ".fifo") {
		in.MessageGroupId = aws.String(groupID(cmp.Or(m.OrderKey, m.Key)))
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

// groupID is the FIFO message group of an order key: the key itself when SQS takes it as a
// group id (1 to 128 characters, each ASCII and printable, not a space), "sha256:" and its
// hash in hex otherwise. Two order keys whose group is the same keep one order between them,
// which is more order, never less.
func groupID(orderKey string) string {
	ok := len(orderKey) <= 128
	for i := 0; ok && i < len(orderKey); i++ {
		ok = orderKey[i] > ' ' && orderKey[i] <= '~'
	}
	if ok {
		return orderKey
	}
	sum := sha256.Sum256([]byte(orderKey))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// validText reports whether SQS takes s as a message body or attribute value: valid UTF-8 of
// tab, newline, carriage return and U+0020 to U+10FFFF, without surrogates, U+FFFE and U+FFFF.
func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false // Go's UTF-8 excludes surrogates too
	}
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0xFFFE || r == 0xFFFF {
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
