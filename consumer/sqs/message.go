package sqs

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Message is one SQS message as the handler sees it: the business payload, with an SNS
// envelope taken off when the message came through an SNS subscription without raw delivery.
//
// None of the transport's ids is a business key: SQS gives every delivery of a fanned-out
// event its own MessageID, and a producer that retries a publish gets a new id for the same
// event. Derive the idempotency key from Body (an order id, a transaction id).
type Message struct {
	// MessageID is the SQS message id: different in each queue an SNS topic fans out to, and
	// for each publish of the same event.
	MessageID string
	// ReceiptHandle identifies this receive, for delete and visibility changes. Empty in
	// messages built for tests.
	ReceiptHandle string
	// Body is the payload: the SNS envelope's Message when one was taken off, otherwise the
	// SQS body.
	Body []byte
	// Attributes are the message attributes with a string value (String and Number types),
	// from the SQS message or, for an SNS envelope, from the envelope's MessageAttributes.
	// Nil when there are none.
	Attributes map[string]string
	// ReceiveCount is the SQS ApproximateReceiveCount: 1 on the first delivery, more on
	// redeliveries. 0 when unknown.
	ReceiveCount int
	// SentAt is when SQS received the message (SentTimestamp); zero when unknown.
	SentAt time.Time
	// SNS is the envelope taken off Body, or nil for a raw message.
	SNS *Envelope
}

// Envelope is the JSON envelope in which SNS delivers a notification to an SQS queue whose
// subscription does not use raw message delivery.
type Envelope struct {
	// Type is "Notification".
	Type string `json:"Type"`
	// MessageID is SNS's id of the publish: the same in every queue of a fan-out, different
	// for each publish (a producer's retry of the same event gets a new one).
	MessageID string `json:"MessageId"`
	// TopicArn is the topic the message was published to.
	TopicArn string `json:"TopicArn"`
	// Subject is the publish's optional subject.
	Subject string `json:"Subject,omitempty"`
	// Message is the published payload.
	Message string `json:"Message"`
	// Timestamp is when SNS accepted the publish.
	Timestamp time.Time `json:"Timestamp"`
	// MessageAttributes are the publish's attributes, each with its Type ("String",
	// "Number", "Binary", "String.Array") and Value (base64 for Binary).
	MessageAttributes map[string]EnvelopeAttribute `json:"MessageAttributes,omitempty"`
	// SequenceNumber is set for FIFO topics.
	SequenceNumber string `json:"SequenceNumber,omitempty"`
	// SignatureVersion, Signature and SigningCertURL let a receiver verify the envelope;
	// this package does not verify it (the queue's access policy decides who may send).
	SignatureVersion string `json:"SignatureVersion,omitempty"`
	Signature        string `json:"Signature,omitempty"`
	SigningCertURL   string `json:"SigningCertURL,omitempty"`
	// UnsubscribeURL is the link that ends the subscription.
	UnsubscribeURL string `json:"UnsubscribeURL,omitempty"`
}

// EnvelopeAttribute is one message attribute in an SNS envelope.
type EnvelopeAttribute struct {
	// Type is the attribute's data type: "String", "Number", "Binary" or "String.Array".
	Type string `json:"Type"`
	// Value is the attribute's value (base64 for Binary).
	Value string `json:"Value"`
}

// UnwrapSNS reports whether body is an SNS notification envelope and, if it is, returns it.
// A body is an envelope when it is a JSON object with Type "Notification", a MessageId, a
// TopicArn beginning with "arn:" and a string Message; anything else (including any payload
// that is not JSON) is not, and is left alone. It never panics.
func UnwrapSNS(body []byte) (*Envelope, bool) {
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' || !bytes.Contains(b, []byte(`"Notification"`)) {
		return nil, false
	}
	var probe struct {
		Envelope
		Message *string `json:"Message"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, false
	}
	env := probe.Envelope
	if env.Type != "Notification" || env.MessageID == "" || !strings.HasPrefix(env.TopicArn, "arn:") ||
		probe.Message == nil {
		return nil, false
	}
	env.Message = *probe.Message
	return &env, true
}

// unwrap fills m.Body, m.SNS and m.Attributes from a raw body and its SQS string attributes.
func (m *Message) unwrap(body string, attrs map[string]string, keepEnvelope bool) {
	m.Body = []byte(body)
	m.Attributes = attrs
	if keepEnvelope {
		return
	}
	env, ok := UnwrapSNS(m.Body)
	if !ok {
		return
	}
	m.SNS = env
	m.Body = []byte(env.Message)
	for k, a := range env.MessageAttributes {
		if a.Type != "String" && a.Type != "Number" {
			continue
		}
		if m.Attributes == nil {
			m.Attributes = make(map[string]string, len(env.MessageAttributes))
		}
		m.Attributes[k] = a.Value
	}
}

// system reads the SQS system attributes this package uses.
func (m *Message) system(attrs map[string]string) {
	if n, err := strconv.Atoi(attrs["ApproximateReceiveCount"]); err == nil {
		m.ReceiveCount = n
	}
	if ms, err := strconv.ParseInt(attrs["SentTimestamp"], 10, 64); err == nil {
		m.SentAt = time.UnixMilli(ms)
	}
}

// fromSQS converts a received SQS message.
func fromSQS(in types.Message, keepEnvelope bool) *Message {
	m := &Message{
		MessageID:     deref(in.MessageId),
		ReceiptHandle: deref(in.ReceiptHandle),
	}
	var attrs map[string]string
	for k, v := range in.MessageAttributes {
		if v.StringValue == nil {
			continue
		}
		if attrs == nil {
			attrs = make(map[string]string, len(in.MessageAttributes))
		}
		attrs[k] = *v.StringValue
	}
	m.unwrap(deref(in.Body), attrs, keepEnvelope)
	m.system(in.Attributes)
	return m
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
