package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/idemkit/idem"
)

// reader is one read connection, held by the store for its whole life, with the record
// lookup prepared on it. Pinning readers skips database/sql's pool on every lookup (finding a
// free connection, then the statement prepared on it), which costs more than the decoding of
// the record the lookup returns. A reader whose connection went bad has conn nil and is
// reopened by the next lookup that takes it.
type reader struct {
	conn *sql.Conn
	get  *sql.Stmt
}

// openReaders pins n connections of s.r, whose pool holds exactly n.
func (s *Store) openReaders(ctx context.Context, n int, query string) error {
	s.getQuery = query
	s.readers = make(chan *reader, n)
	for range n {
		r := new(reader)
		if err := s.reopen(ctx, r); err != nil {
			return err
		}
		s.readers <- r
		s.nreaders++
	}
	return nil
}

// reopen gives r a fresh connection and statement.
func (s *Store) reopen(ctx context.Context, r *reader) error {
	c, err := s.r.Conn(ctx)
	if err != nil {
		return err
	}
	st, err := c.PrepareContext(ctx, s.getQuery)
	if err != nil {
		c.Close()
		return err
	}
	r.conn, r.get = c, st
	return nil
}

func (r *reader) close() error {
	if r.conn == nil {
		return nil
	}
	err := errors.Join(r.get.Close(), r.conn.Close())
	r.conn, r.get = nil, nil
	return err
}

// lookup reads the record of key on a free reader (see read).
func (s *Store) lookup(ctx context.Context, key, fp string, now int64, look bool) (rec idem.Record, found, claimable bool, err error) {
	var r *reader
	select {
	case r = <-s.readers:
	default:
		select {
		case r = <-s.readers:
		case <-ctx.Done():
			return rec, false, false, ctx.Err()
		}
	}
	if r == nil { // the channel is closed: the store is closed
		return rec, false, false, ErrClosed
	}
	defer func() { s.readers <- r }()
	if r.conn == nil {
		if err := s.reopen(ctx, r); err != nil {
			return rec, false, false, err
		}
	}
	rec, found, claimable, err = s.read(ctx, r.get, key, fp, now, look)
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		// Give the connection back to the pool, so that the next lookup on r can reopen.
		_ = r.close()
	}
	return rec, found, claimable, err
}

// closeReaders waits for every reader to be free, closes them and the channel.
func (s *Store) closeReaders() error {
	if s.readers == nil {
		return nil
	}
	var errs []error
	for range s.nreaders {
		errs = append(errs, (<-s.readers).close())
	}
	close(s.readers)
	return errors.Join(errs...)
}
