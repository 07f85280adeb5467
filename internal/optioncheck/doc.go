// Package optioncheck holds the test that keeps one rule for invalid options across idem's
// packages: every constructor refuses bad options with an error that matches
// idem.ErrInvalidInput, starts with "<package>: invalid options: " naming the package that
// raised it, and names the field at fault.
package optioncheck
