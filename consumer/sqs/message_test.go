package sqs_test

import (
	"encoding/json"
	"testing"

	"github.com/idemkit/idem/consumer/sqs"
)

// envelope is what SNS delivers to an SQS queue without raw message delivery (taken from a
// real delivery by fauxqs, with a Subject of null as SNS sends when none was given).
const envelope = `{"Type":"Notification","MessageId":"3a6a6cde-5523-43c8-a32b-f2c3fd6ff4c4",` +
	`"TopicArn":"arn:aws:sns:us-east-1:000000000000:orders","Subject":null,` +
	`"Message":"{\"order\":\"o-1\",\"cents\":500}","Timestamp":"2026-11-30T20:37:42.292Z",` +
	`"SignatureVersion":"1","Signature":"EXAMPLE","SigningCertURL":"https://sns.example/cert.pem",` +
	`"UnsubscribeURL":"https://sns.example/?Action=Unsubscribe",` +
	`"MessageAttributes":{"tenant":{"Type":"String","Value":"acme"},"n":{"Type":"Number","Value":"7"},` +
	`"blob":{"Type":"Binary","Value":"AAE="}}}`

func TestUnwrapSNS(t *testing.T) {
	t.Parallel()
	env, ok := sqs.UnwrapSNS([]byte(envelope))
	if !ok {
		t.Fatal("envelope not recognised")
	}
	if env.Message != `{"order":"o-1","cents":500}` || env.MessageID != "3a6a6cde-5523-43c8-a32b-f2c3fd6ff4c4" ||
		env.TopicArn != "arn:aws:sns:us-east-1:000000000000:orders" || env.Subject != "" ||
		env.Timestamp.IsZero() || env.MessageAttributes["tenant"].Value != "acme" {
		t.Fatalf("envelope decoded wrong: %+v", env)
	}

	notEnvelopes := map[string]string{
		"empty":              ``,
		"not json":           `order o-1`,
		"json array":         `["Notification"]`,
		"business json":      `{"order":"o-1","Type":"Notification"}`,
		"no topic":           `{"Type":"Notification","MessageId":"m","Message":"x"}`,
		"topic not an arn":   `{"Type":"Notification","MessageId":"m","TopicArn":"orders","Message":"x"}`,
		"no message":         `{"Type":"Notification","MessageId":"m","TopicArn":"arn:aws:sns:x"}`,
		"message not string": `{"Type":"Notification","MessageId":"m","TopicArn":"arn:aws:sns:x","Message":{"a":1}}`,
		"subscription":       `{"Type":"SubscriptionConfirmation","MessageId":"m","TopicArn":"arn:aws:sns:x","Message":"x"}`,
		"truncated":          envelope[:len(envelope)-3],
	}
	for name, body := range notEnvelopes {
		if env, ok := sqs.UnwrapSNS([]byte(body)); ok || env != nil {
			t.Errorf("%s: %q taken for an envelope: %+v", name, body, env)
		}
	}
	// An empty published message is still an envelope.
	if env, ok := sqs.UnwrapSNS([]byte(`{"Type":"Notification","MessageId":"m","TopicArn":"arn:aws:sns:x","Message":""}`)); !ok || env.Message != "" {
		t.Errorf("empty message: %v %+v", ok, env)
	}
}

// FuzzUnwrapSNS: any body is either left alone or yields an envelope whose Message is what a
// JSON decoder finds there; never a panic.
func FuzzUnwrapSNS(f *testing.F) {
	f.Add([]byte(envelope))
	f.Add([]byte(`{"Type":"Notification"}`))
	f.Add([]byte(`plain`))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, ok := sqs.UnwrapSNS(body)
		if !ok {
			if env != nil {
				t.Fatal("non-nil envelope with ok false")
			}
			return
		}
		var v struct{ Message string }
		if err := json.Unmarshal(body, &v); err != nil || v.Message != env.Message {
			t.Fatalf("envelope message %q, decoder says %q (%v)", env.Message, v.Message, err)
		}
	})
}
