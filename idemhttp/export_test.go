package idemhttp

import "net/http"

// NewCounted is New, with a function that returns the bytes charged to the memory budget
// (Options.MemoryBudget) at the moment it is called.
func NewCounted(opt Options) (func(http.Handler) http.Handler, func() int64, error) {
	m, err := newMiddleware(opt)
	if err != nil {
		return nil, nil, err
	}
	return func(next http.Handler) http.Handler { return &handler{m: m, next: next} }, m.budget.InUse, nil
}

// MemoryBudgetOf returns the memory budget the middleware uses with opt: -1 when unlimited.
func MemoryBudgetOf(opt Options) (int64, error) {
	m, err := newMiddleware(opt)
	if err != nil {
		return 0, err
	}
	return max(m.budget.limit, -1), nil
}
