package natsout_test

import "github.com/idemkit/idem/outbox"

func outboxMessage(topic string, id int64) outbox.Message {
	return outbox.Message{ID: id, Key: "k", Topic: topic, Body: []byte("b")}
}
