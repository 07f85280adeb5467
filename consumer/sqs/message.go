package sqs

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemkit/idem/consumer"
)

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

// Message returns the consumer.Message for a received SQS message: its body, with an SNS
// envelope taken off unless keepEnvelope is set (see UnwrapSNS); its string-valued message
// attributes as Header (an envelope's String and Number attributes, for an SNS delivery); its
// SQS MessageId as ID; the topic ARN as Subject for an SNS delivery and the queue's name
// otherwise; and Redelivered when its ApproximateReceiveCount is above 1. (The message must
// have been received with the ApproximateReceiveCount system attribute for that.) It sets no
// Extend hook: the Worker does.
func Message(in types.Message, queueURL string, keepEnvelope bool) *consumer.Message {
	var h map[string][]string
	for k, v := range in.MessageAttributes {
		if v.StringValue == nil {
			continue
		}
		if h == nil {
			h = make(map[string][]string, len(in.MessageAttributes))
		}
		h[k] = []string{*v.StringValue}
	}
	return build(deref(in.MessageId), deref(in.Body), h, in.Attributes, queueName(queueURL), keepEnvelope)
}

// LambdaMessage returns the consumer.Message for a record of a Lambda SQS event, as Message
// does for a received message; the Subject of a raw record is the queue's name from its event
// source ARN.
func LambdaMessage(r events.SQSMessage, keepEnvelope bool) *consumer.Message {
	var h map[string][]string
	for k, v := range r.MessageAttributes {
		if v.StringValue == nil {
			continue
		}
		if h == nil {
			h = make(map[string][]string, len(r.MessageAttributes))
		}
		h[k] = []string{*v.StringValue}
	}
	arn := r.EventSourceARN
	return build(r.MessageId, r.Body, h, r.Attributes, arn[strings.LastIndexByte(arn, ':')+1:], keepEnvelope)
}

func build(id, body string, header map[string][]string, system map[string]string, queue string, keepEnvelope bool) *consumer.Message {
	m := &consumer.Message{ID: id, Body: []byte(body), Header: header, Subject: queue}
	if n, err := strconv.Atoi(system["ApproximateReceiveCount"]); err == nil && n > 1 {
		m.Redelivered = true
	}
	if keepEnvelope {
		return m
	}
	env, ok := UnwrapSNS(m.Body)
	if !ok {
		return m
	}
	m.Body = []byte(env.Message)
	m.Subject = env.TopicArn
	for k, a := range env.MessageAttributes {
		if a.Type != "String" && a.Type != "Number" {
			continue
		}
		if m.Header == nil {
			m.Header = make(map[string][]string, len(env.MessageAttributes))
		}
		m.Header[k] = []string{a.Value}
	}
	return m
}

// queueName returns the last path element of a queue URL.
func queueName(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
