// Package txbench measures what transaction mode costs over HTTP: a keyed POST that inserts
// one business row, served by idemhttp with a store's TxRunner (claim, insert and completion
// in one transaction) and by the same handler doing its insert in its own transaction without
// idem, in the same run. Its tests count the database round trips each request takes and, with
// IDEM_TX_BENCH set, compare the two request rates over several rounds (docs/bench/transactions.md).
package txbench
