package procstat_test

import (
	"fmt"

	"github.com/idemkit/idem/bench/procstat"
)

// The peak resident memory of this process is at least its current one.
func ExampleMem() {
	m, err := procstat.Mem(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.RSS > 0, m.PeakRSS >= m.RSS)
	// Output: true true
}

func ExampleCPU() {
	before, _ := procstat.CPU(0)
	x := 0
	for i := range 50_000_000 {
		x += i
	}
	after, _ := procstat.CPU(0)
	fmt.Println(after >= before, x > 0)
	// Output: true true
}
