package dynamostore_test

import (
	"errors"

	"github.com/idemkit/idem"
)

func isInvalid(err error) bool { return errors.Is(err, idem.ErrInvalidInput) }

func errorsIs(err, target error) bool { return errors.Is(err, target) }
