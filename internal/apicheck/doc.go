// Package apicheck keeps the record of idem's exported API: api/ at the repository root holds,
// for every public package, one line per exported constant, variable, function, type, field
// and method. Its test regenerates the record from the source and fails on any difference, so
// a change to the public API is always a visible, reviewed diff. After an intended change:
//
//	go test ./internal/apicheck -update
package apicheck
