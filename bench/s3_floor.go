package main

// Section 3's floor: bench/xskfloor/xskfloor.c, a minimal AF_XDP
// ping-pong in C (libxdp), on the same beds, in the same XDP modes and
// with the same CPU pinning as xdpfab. The XDP program it runs behind is
// made here (a dozen instructions: UDP to the floor's port goes to the
// XSKMAP slot of its rx queue, everything else passes), so no clang runs
// at bench time; each side's process gets its XSKMAP as descriptor 3.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

const floorPort = 7100

// floorSide is one host's half of the floor: its XSKMAP and the program
// attached to its interface.
type floorSide struct {
	xsks *ebpf.Map
	prog *ebpf.Program
	l    link.Link
}

func (f *floorSide) Close() {
	if f.l != nil {
		f.l.Close()
	}
	if f.prog != nil {
		f.prog.Close()
	}
	if f.xsks != nil {
		f.xsks.Close()
	}
}

// newFloorSide makes the XSKMAP and the redirect program and attaches it
// to h's interface in mode.
func newFloorSide(h *testbed.Host, mode loader.Mode) (_ *floorSide, err error) {
	f := &floorSide{}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if f.xsks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "floor_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 64}); err != nil {
		return nil, err
	}
	// Ethernet + IPv4 without options + UDP to floorPort: loads are
	// little-endian, so the big-endian fields compare byte-swapped.
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 38),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R4, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R4, 0x0008, "pass"), // ETH_P_IP
		asm.LoadMem(asm.R4, asm.R2, 23, asm.Byte),
		asm.JNE.Imm(asm.R4, 17, "pass"), // IPPROTO_UDP
		asm.LoadMem(asm.R4, asm.R2, 36, asm.Half),
		asm.JNE.Imm(asm.R4, int32(floorPort>>8|(floorPort&0xff)<<8), "pass"),
		asm.LoadMem(asm.R2, asm.R6, 16, asm.Word), // rx_queue_index
		asm.LoadMapPtr(asm.R1, f.xsks.FD()),
		asm.Mov.Imm(asm.R3, xdpPass), // no socket in the slot: pass
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	}
	if f.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Name: "bench_floor", Type: ebpf.XDP, AttachType: ebpf.AttachXDP, License: "GPL", Instructions: insns}); err != nil {
		return nil, fmt.Errorf("floor program: %w", err)
	}
	flags := link.XDPDriverMode
	if mode == loader.Generic {
		flags = link.XDPGenericMode
	}
	err = h.Do(func() (err error) {
		f.l, err = link.AttachXDP(link.XDPOptions{Program: f.prog, Interface: h.Ifindex, Flags: flags})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach floor program: %w", err)
	}
	return f, nil
}

// mapFile is a duplicate of the XSKMAP's descriptor for a child process.
func (f *floorSide) mapFile() (*os.File, error) {
	fd, err := unix.FcntlInt(uintptr(f.xsks.FD()), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "xskmap"), nil
}

// floorOut is what the floor's client prints.
type floorOut struct {
	Size      int     `json:"size"`
	Iters     int     `json:"iters"`
	ElapsedNS int64   `json:"elapsed_ns"`
	HalvesNS  []int64 `json:"halves_ns"`
}

// floorPingPong runs one floor ping-pong of size-byte payloads: the server
// in B (CPU cfg.cpuLoad), the client in A (CPU cfg.cpuMeasure).
func floorPingPong(cfg *config, bd *testbed.Bed, sa, sb *floorSide, size, iters, warm int) (ppResult, error) {
	ctx, cancel := context.WithTimeout(cfg.ctx, time.Minute)
	defer cancel()
	fb, err := sb.mapFile()
	if err != nil {
		return ppResult{}, err
	}
	defer fb.Close()
	srv := exec.CommandContext(ctx, "ip", "netns", "exec", bd.B.Name(), "taskset", "-c", fmt.Sprint(cfg.cpuLoad),
		cfg.xskfloor, "server", testbed.LinkName, fmt.Sprint(floorPort), fmt.Sprint(iters+warm))
	srv.ExtraFiles = []*os.File{fb}
	var srvErr strings.Builder
	srv.Stderr = &srvErr
	out, err := srv.StdoutPipe()
	if err != nil {
		return ppResult{}, err
	}
	if err := srv.Start(); err != nil {
		return ppResult{}, err
	}
	defer func() {
		if srv.ProcessState == nil {
			srv.Process.Kill()
			srv.Wait()
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		srv.Process.Kill()
		srv.Wait()
		return ppResult{}, fmt.Errorf("floor server: %v %s", err, strings.TrimSpace(srvErr.String()))
	}
	go io.Copy(io.Discard, out)
	fa, err := sa.mapFile()
	if err != nil {
		return ppResult{}, err
	}
	defer fa.Close()
	cli := exec.CommandContext(ctx, "ip", "netns", "exec", bd.A.Name(), "taskset", "-c", fmt.Sprint(cfg.cpuMeasure),
		cfg.xskfloor, "client", testbed.LinkName, fmt.Sprint(floorPort), bd.A.MAC.String(), bd.B.MAC.String(),
		bd.A.IPv4.String(), bd.B.IPv4.String(), fmt.Sprint(size), fmt.Sprint(iters), fmt.Sprint(warm))
	cli.ExtraFiles = []*os.File{fa}
	var cliErr strings.Builder
	cli.Stderr = &cliErr
	b, err := cli.Output()
	if err != nil {
		return ppResult{}, fmt.Errorf("floor client: %v: %s", err, strings.TrimSpace(cliErr.String()))
	}
	if err := srv.Wait(); err != nil {
		return ppResult{}, fmt.Errorf("floor server: %v: %s", err, strings.TrimSpace(srvErr.String()))
	}
	var fo floorOut
	if err := json.Unmarshal(b, &fo); err != nil {
		return ppResult{}, fmt.Errorf("floor client output: %w", err)
	}
	if fo.Iters != iters || len(fo.HalvesNS) != iters {
		return ppResult{}, errors.New("floor client: short output")
	}
	halves := make([]time.Duration, len(fo.HalvesNS))
	for i, h := range fo.HalvesNS {
		halves[i] = time.Duration(h)
	}
	return summarizePP(halves, time.Duration(fo.ElapsedNS)), nil
}

// floorRun is the floor on its bed in one mode: its repetitions run paired
// with xdpfab's (one), and finish adds what they measured, per size, and
// measures on their own the sizes no pair ran.
type floorRun struct {
	cfg         *config
	bd          *testbed.Bed
	mode        loader.Mode
	key         string
	mtu         int
	iters, warm int
	sa, sb      *floorSide
	res         map[int][]ppResult // by the floor's size
	sizes       []int              // in the order first measured
}

func newFloorRun(cfg *config, bd *testbed.Bed, mode loader.Mode, key string, mtu, iters, warm int) (_ *floorRun, err error) {
	f := &floorRun{cfg: cfg, bd: bd, mode: mode, key: key, mtu: mtu, iters: iters, warm: warm, res: map[int][]ppResult{}}
	if f.sa, err = newFloorSide(bd.A, mode); err != nil {
		return nil, err
	}
	if f.sb, err = newFloorSide(bd.B, mode); err != nil {
		f.sa.Close()
		return nil, err
	}
	return f, nil
}

func (f *floorRun) Close() {
	f.sa.Close()
	f.sb.Close()
}

// one runs one repetition at xdpfab's size (the floor's largest message
// when that does not fit one of its frames).
func (f *floorRun) one(size int) (ppResult, error) {
	size = min(size, floorMaxMsg(f.mtu))
	x, err := floorPingPong(f.cfg, f.bd, f.sa, f.sb, size, f.iters, f.warm)
	if err != nil {
		return ppResult{}, fmt.Errorf("%d B: %w", size, err)
	}
	if _, ok := f.res[size]; !ok {
		f.sizes = append(f.sizes, size)
	}
	f.res[size] = append(f.res[size], x)
	return x, nil
}

// finish runs the sizes no pair ran (xdpfab not selected) and adds every
// size's repetitions.
func (f *floorRun) finish(r *results, add func(string, string, int, []ppResult)) error {
	for _, s := range ppSizes {
		if m := floorMaxMsg(f.mtu); s > m {
			r.note("pp", "%s: %d B does not fit one UMEM frame (no multi-buffer) at MTU %d; measured (and paired) at %d B instead", f.key, s, f.mtu, m)
			s = m
		}
		for len(f.res[s]) < f.cfg.reps {
			if _, err := f.one(s); err != nil {
				return err
			}
		}
	}
	title := fmt.Sprintf("C AF_XDP floor (libxdp), %s XDP", f.mode)
	for _, s := range f.sizes {
		// Two of xdpfab's sizes pair with the floor's largest message:
		// its row keeps the first pairs' repetitions, as many as any.
		add(f.key, title, s, f.res[s][:f.cfg.reps])
	}
	return nil
}
