package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/idemkit/idem/bench/procstat"
)

// Proc is a server process started for a benchmark, listening on 127.0.0.1.
type Proc struct {
	// Name says what it is, for messages.
	Name string
	// Addr is the host:port it listens on.
	Addr string

	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// URL returns http://Addr followed by path.
func (p *Proc) URL(path string) string { return "http://" + p.Addr + path }

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// CPU returns the CPU time the process has used so far.
func (p *Proc) CPU() (time.Duration, error) { return procstat.CPU(p.Pid()) }

// Mem returns the process's resident memory and its peak.
func (p *Proc) Mem() (procstat.Memory, error) { return procstat.Mem(p.Pid()) }

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// startProc starts bin with args, where the string "{addr}" in args is replaced by a free
// loopback address, with GOMAXPROCS=procs (0: inherited) and output to a log file in dir.
// It returns once ready answers 2xx (GET http://addr+ready), or accepts a TCP connection
// when ready is "", within 30 seconds.
func startProc(ctx context.Context, dir, name string, procs int, ready string, bin string, args ...string) (*Proc, error) {
	return startProcEnv(ctx, dir, name, procs, nil, ready, bin, args...)
}

// startProcEnv is startProc with env added to the process's environment.
func startProcEnv(ctx context.Context, dir, name string, procs int, env []string, ready string, bin string, args ...string) (*Proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	for i, a := range args {
		if a == "{addr}" {
			args[i] = addr
		}
	}
	logPath := dir + "/" + name + ".log"
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	if procs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(procs))
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("harness: start %s: %w", name, err)
	}
	p := &Proc{Name: name, Addr: addr, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		if ready == "" {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				return p, nil
			}
		} else if resp, err := client.Get(p.URL(ready)); err == nil {
			resp.Body.Close()
			if resp.StatusCode < 300 {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("harness: %s exited before it was ready (%v); see %s:\n%s", name, p.err, logPath, tail(logPath))
		case <-ctx.Done():
			p.Stop()
			return nil, fmt.Errorf("harness: %s not ready on %s within 30s; see %s", name, addr, logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop asks the process to stop (SIGTERM) and kills it if it has not exited within 10 seconds.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// ErrConfig reports an invalid harness configuration; the message names the field.
var ErrConfig = errors.New("harness: invalid configuration")
