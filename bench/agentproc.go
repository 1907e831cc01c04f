package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/stack"
)

// benchAgent is `xdpfab agent` running as its own process in a host of a
// bed, as on a node (sections 7 and 8): xdpfab built from the module this
// bench belongs to (bench/..), a pin root and a socket in a temporary
// directory, and a client connected to it.
type benchAgent struct {
	sock string
	c    *client.Client
	log  bytes.Buffer
	dir  string
	cmd  *exec.Cmd
}

// startAgent builds xdpfab, starts its agent in h on the bed's interface
// and connects to it.
func startAgent(cfg *config, h *testbed.Host) (_ *benchAgent, err error) {
	a := &benchAgent{}
	if a.dir, err = os.MkdirTemp("", "xdpfab-bench-agent"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	bin := filepath.Join(a.dir, "xdpfab")
	if out, err := exec.CommandContext(cfg.ctx, "go", "build", "-C", "..", "-o", bin, "./cmd/xdpfab").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build xdpfab (run from bench/): %v: %s", err, out)
	}
	a.sock = filepath.Join(a.dir, "agent.sock")
	a.cmd = exec.Command(bin, "agent", "--iface", testbed.LinkName, "--pin-root", filepath.Join(a.dir, "bpffs"),
		"--socket", a.sock, "--metrics", "")
	a.cmd.Stdout, a.cmd.Stderr = &a.log, &a.log
	if err := h.Do(a.cmd.Start); err != nil {
		a.cmd = nil
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if a.c, err = client.Dial(a.sock); err == nil {
			return a, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("agent did not come up: %v: %s", err, a.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastLog is the agent's last log line, for errors.
func (a *benchAgent) lastLog() string { return lastLine(a.log.Bytes()) }

// Close disconnects, stops the agent (SIGTERM) and removes its files.
func (a *benchAgent) Close() {
	if a.c != nil {
		a.c.Close()
	}
	if a.cmd != nil {
		a.cmd.Process.Signal(syscall.SIGTERM)
		a.cmd.Wait()
	}
	loader.UnmountBPFFS(filepath.Join(a.dir, "bpffs"))
	os.RemoveAll(a.dir)
}

// agentStack opens what an application process of sections 7 and 8 runs
// on: a connection to the agent on sock, a read-only view of the named AV
// req.AV, the CQs (the receive one with wait object rxWait) and the
// endpoint the agent prepares for req; attr gives the endpoint's other
// attributes. closeAll releases them in reverse order.
func agentStack(sock string, req ctl.EPOpenArgs, attr ep.Attr, cqSize int, rxWait cq.WaitObj) (_ *stack.Stack, closeAll func(), err error) {
	var undo []func()
	closeAll = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	c, err := client.Dial(sock)
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() { c.Close() })
	dp, a, err := c.OpenAV(req.AV)
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() { dp.Close() }, func() { a.Close() })
	s := &stack.Stack{AV: a}
	// An application that makes every call from one goroutine
	// (FI_THREAD_DOMAIN) reads and, through its reads' progress, writes
	// its CQs there too: no locks in them either.
	single := attr.Threading == fi.ThreadDomain
	if s.TxCQ, err = cq.Open(cq.Attr{Size: cqSize, Format: cq.FormatMsg, SingleProducer: single, SingleConsumer: single}); err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() { s.TxCQ.Close() })
	if s.RxCQ, err = cq.Open(cq.Attr{Size: cqSize, Format: cq.FormatMsg, WaitObj: rxWait, SingleProducer: single, SingleConsumer: single}); err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() { s.RxCQ.Close() })
	attr.AV, attr.TxCQ, attr.RxCQ = a, s.TxCQ, s.RxCQ
	if s.EP, err = c.OpenEndpoint(req, attr); err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() { s.EP.Close() })
	return s, closeAll, nil
}
