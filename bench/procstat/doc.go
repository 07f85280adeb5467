// Package procstat reads a process's CPU time and resident memory from Linux's /proc, for
// benchmarks that measure other processes (a gateway, a server under load) from outside.
//
// # CPU
//
// CPU reads utime + stime from /proc/PID/stat: every thread of the process, in 10ms ticks.
// Divide the difference over a run by the requests served for CPU per request; make the run
// long enough (a second of CPU or more) for the tick to be noise.
//
// # Memory
//
// Mem reads VmRSS and VmHWM from /proc/PID/status. VmHWM is the peak resident set since the
// process started: read it after a burst to know the most the burst needed.
package procstat
