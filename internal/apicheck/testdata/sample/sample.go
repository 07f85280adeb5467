// Package sample has one exported name of each kind, for apicheck's own test.
package sample

import (
	"context"
	"errors"
)

// Mode is an enumeration.
type Mode uint8

// Modes.
const (
	A Mode = iota + 1
	B
	hidden
)

// Limit is an untyped constant.
const Limit = 10

// ErrBad is an error value.
var ErrBad = errors.New("bad")

// Base is embedded.
type Base struct{}

// Thing has exported and unexported fields.
type Thing struct {
	Base
	Name   string
	secret int
}

// New makes a Thing.
func New(n int) (*Thing, error) { return &Thing{secret: n}, nil }

// Run runs.
func (t *Thing) Run(ctx context.Context) error { return nil }

func (t *Thing) internalOnly() {}

// Doer does.
type Doer interface {
	Do(key string) error
	unexportedMethod()
}

// Pair is generic.
type Pair[K comparable, V any] struct {
	Key K
	Val V
}

// Map is a generic function.
func Map[In, Out any](in []In, f func(In) Out) []Out { return nil }
