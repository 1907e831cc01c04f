package main

// BPF_PROG_TEST_RUN and the small helper programs the benchmarks need.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/xdpfab/xdpfab/wire"
	"golang.org/x/sys/unix"
)

// progTestRunAttr is the BPF_PROG_TEST_RUN part of union bpf_attr.
type progTestRunAttr struct {
	ProgFD      uint32
	Retval      uint32
	DataSizeIn  uint32
	DataSizeOut uint32
	DataIn      uint64
	DataOut     uint64
	Repeat      uint32
	Duration    uint32
	CtxSizeIn   uint32
	CtxSizeOut  uint32
	CtxIn       uint64
	CtxOut      uint64
	Flags       uint32
	CPU         uint32
	BatchSize   uint32
	_           uint32
}

// xdpMD is struct xdp_md.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// testRun runs prog on data repeat times and returns the kernel's average
// duration per run. live sets BPF_F_TEST_XDP_LIVE_FRAMES (frames really go
// where the program sends them); ifindex and queue say where they arrive
// (an ifindex of the calling thread's namespace). A run a signal interrupts
// is started again.
func testRun(prog *ebpf.Program, data []byte, repeat uint32, live bool, ifindex, queue int) (uint32, time.Duration, error) {
	for {
		ret, d, err := testRunOnce(prog, data, repeat, live, ifindex, queue)
		if !errors.Is(err, unix.EINTR) {
			return ret, d, err
		}
	}
}

// testRunOnce is testRun without the restart: a signal makes it fail with
// EINTR, in live-frame mode after part of the frames went out already.
func testRunOnce(prog *ebpf.Program, data []byte, repeat uint32, live bool, ifindex, queue int) (uint32, time.Duration, error) {
	ctx := xdpMD{DataEnd: uint32(len(data)), IngressIfindex: uint32(ifindex), RxQueueIndex: uint32(queue)}
	attr := progTestRunAttr{
		ProgFD:     uint32(prog.FD()),
		DataSizeIn: uint32(len(data)),
		DataIn:     uint64(uintptr(unsafe.Pointer(&data[0]))),
		Repeat:     repeat,
		CtxSizeIn:  uint32(unsafe.Sizeof(ctx)),
		CtxIn:      uint64(uintptr(unsafe.Pointer(&ctx))),
	}
	if live {
		attr.Flags = unix.BPF_F_TEST_XDP_LIVE_FRAMES
		attr.BatchSize = 64
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(data)
	runtime.KeepAlive(&ctx)
	if errno != 0 {
		return 0, 0, fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
	}
	return attr.Retval, time.Duration(attr.Duration), nil
}

// liveFrames reports whether the kernel runs live-frame test runs (the
// in-kernel injector of sections 1, 2 and 6); some refuse them with EPERM
// even to root (docs/platform.md#kernels-without-live-frames). It asks
// once, with one frame through a program that drops it.
func liveFrames() bool {
	liveOnce.Do(func() {
		drop, err := retProgram(xdpDrop)
		if err != nil {
			return
		}
		defer drop.Close()
		frame := make([]byte, 64)
		if _, _, err := testRun(drop, frame, 1, true, 0, 0); errors.Is(err, unix.EPERM) {
			noLiveFrames.Store(true)
		}
	})
	return !noLiveFrames.Load()
}

var liveOnce sync.Once

// retProgram is an XDP program that only returns verdict (the empty
// program of the cost measurements, and the XDP_DROP ceiling).
func retProgram(verdict int32) (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "bench_ret", Type: ebpf.XDP, AttachType: ebpf.AttachXDP, License: "GPL", Flags: unix.BPF_F_XDP_HAS_FRAGS,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, verdict), asm.Return()},
	})
}

const (
	xdpDrop = 1
	xdpPass = 2
)

// dropCounter is an XDP program that counts frames in a per-CPU array and
// drops them: the XDP_DROP ceiling of an interface under a real sender.
type dropCounter struct {
	prog  *ebpf.Program
	count *ebpf.Map
}

func newDropCounter() (*dropCounter, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "bench_drops", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return nil, err
	}
	insns := asm.Instructions{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, xdpDrop).WithSymbol("out"),
		asm.Return(),
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "bench_dropcnt", Type: ebpf.XDP, AttachType: ebpf.AttachXDP, License: "GPL", Instructions: insns})
	if err != nil {
		m.Close()
		return nil, err
	}
	return &dropCounter{prog: p, count: m}, nil
}

func (d *dropCounter) total() uint64 {
	var per []uint64
	if err := d.count.Lookup(uint32(0), &per); err != nil {
		return 0
	}
	var s uint64
	for _, v := range per {
		s += v
	}
	return s
}

func (d *dropCounter) Close() { d.prog.Close(); d.count.Close() }

// rewriter is an XDP program for the in-kernel injector: live-frame test
// runs repeat one frame, so it rewrites each frame's source address (and
// the IPv4 header checksum), UDP source port and xdpfab rx_ctx from a
// table, cycling through the table with a per-CPU counter, then tail-calls
// the program under test (or, with tail nil, passes the frame to the kernel
// stack). Live frames keep their data between runs, so rewriting is all it
// takes. Frames must be Ethernet + IPv4 (no options) or IPv6 + UDP. The UDP
// checksum is rewritten too, from the table (precomputed per source), since
// the program under test verifies it; a frame whose UDP checksum is 0
// ("none", IPv4) keeps 0.
type rewriter struct {
	prog       *ebpf.Program
	ctr, table *ebpf.Map
	progs      *ebpf.Map
}

// rewriteEntry is one table value, in network byte order as it goes into
// the frame. IPv4 addresses use Addr[:4].
type rewriteEntry struct {
	Addr  [16]byte
	Csum  [2]byte
	Sport [2]byte
	RxCtx uint8
	_     [1]byte
	UCsum [2]byte // the UDP checksum for this source (0 stays 0)
}

// rewriteTable builds the table for sources (one address family), all with
// rx context 0, for frames shaped like base. partial: base's UDP checksum
// field holds the pseudo-header sum a CHECKSUM_PARTIAL sender leaves
// (wire.Frame.PartialUDPCsum), not a full checksum.
func rewriteTable(base []byte, sources []netip.AddrPort, partial bool) []rewriteEntry {
	t := make([]rewriteEntry, len(sources))
	for i, s := range sources {
		e := &t[i]
		binary.BigEndian.PutUint16(e.Sport[:], s.Port())
		if a := s.Addr().Unmap(); a.Is4() {
			b4 := a.As4()
			copy(e.Addr[:], b4[:])
			ip := make([]byte, 20)
			copy(ip, base[14:34])
			copy(ip[12:16], b4[:])
			ip[10], ip[11] = 0, 0
			binary.BigEndian.PutUint16(e.Csum[:], wire.IPv4Checksum(ip))
		} else {
			e.Addr = a.As16()
		}
		e.UCsum = udpCsumFor(base, s, partial)
	}
	return t
}

// udpCsumFor is base's UDP checksum with the source address and port
// replaced by src (RFC 1624 incremental update; 0, "none", stays 0). A
// partial field (the pseudo header's sum, not complemented, which holds no
// port) changes with the address only.
func udpCsumFor(base []byte, src netip.AddrPort, partial bool) [2]byte {
	v4 := base[12] == 0x08 && base[13] == 0x00
	addrOff, addrLen, udp := 14+12, 4, 34
	if !v4 {
		addrOff, addrLen, udp = 14+8, 16, 54
	}
	var out [2]byte
	old := binary.BigEndian.Uint16(base[udp+6:])
	if old == 0 {
		return out
	}
	newAddr := src.Addr().Unmap().AsSlice()
	sum := uint32(^old)
	if partial {
		sum = uint32(old)
	}
	for i := 0; i < addrLen; i += 2 {
		sum += uint32(^binary.BigEndian.Uint16(base[addrOff+i:])) + uint32(binary.BigEndian.Uint16(newAddr[i:]))
	}
	if !partial {
		sum += uint32(^binary.BigEndian.Uint16(base[udp:])) + uint32(src.Port())
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	switch {
	case partial:
		c = uint16(sum)
	case c == 0:
		c = 0xffff
	}
	binary.BigEndian.PutUint16(out[:], c)
	return out
}

func newRewriter(v6 bool, entries []rewriteEntry, tail *ebpf.Program) (*rewriter, error) {
	return newRewriterPop(v6, entries, tail, 0)
}

// newRewriterPop is newRewriter for plain (not live-frame) test runs of
// frames of frameLen bytes: a plain run hands every repetition the buffer
// as the last one left it, so the rewriter first takes off what the
// program under test pushed in front of the frame (xdpfab's metadata)
// with bpf_xdp_adjust_head, called on every run, also with 0 (both
// programs of a comparison pay that call). frameLen 0: no such step.
func newRewriterPop(v6 bool, entries []rewriteEntry, tail *ebpf.Program, frameLen int) (*rewriter, error) {
	n := len(entries)
	if n == 0 || n&(n-1) != 0 {
		return nil, fmt.Errorf("rewriter: %d entries, want a power of two", n)
	}
	r := &rewriter{}
	var err error
	if r.ctr, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}); err != nil {
		return nil, err
	}
	if r.table, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 24, MaxEntries: uint32(n)}); err != nil {
		r.Close()
		return nil, err
	}
	keys := make([]uint32, n)
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := r.table.BatchUpdate(keys, entries, nil); err != nil {
		r.Close()
		return nil, fmt.Errorf("rewriter table: %w", err)
	}
	ipLen := int16(20)
	if v6 {
		ipLen = 40
	}
	udpSp := 14 + ipLen
	rxCtx := 14 + ipLen + 8 + 7
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
	}
	if frameLen > 0 {
		insns = append(insns,
			asm.LoadMem(asm.R2, asm.R6, 4, asm.Word), // data_end
			asm.LoadMem(asm.R3, asm.R6, 0, asm.Word), // data
			asm.Sub.Reg(asm.R2, asm.R3),
			asm.Sub.Imm(asm.R2, int32(frameLen)), // what was pushed: pop it
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.FnXdpAdjustHead.Call(),
		)
	}
	insns = append(insns,
		asm.LoadMem(asm.R7, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R8, asm.R6, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Add.Imm(asm.R2, int32(rxCtx)+1),
		asm.JGT.Reg(asm.R2, asm.R8, "drop"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, r.ctr.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "drop"),
		asm.LoadMem(asm.R9, asm.R0, 0, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R9),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.And.Imm(asm.R9, int32(n-1)),
		asm.StoreMem(asm.RFP, -8, asm.R9, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.LoadMapPtr(asm.R1, r.table.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "drop"),
	)
	if v6 {
		for off := int16(0); off < 16; off += 8 {
			insns = append(insns,
				asm.LoadMem(asm.R1, asm.R0, off, asm.DWord),
				asm.StoreMem(asm.R7, 14+8+off, asm.R1, asm.DWord))
		}
	} else {
		insns = append(insns,
			asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
			asm.StoreMem(asm.R7, 14+12, asm.R1, asm.Word),
			asm.LoadMem(asm.R1, asm.R0, 16, asm.Half),
			asm.StoreMem(asm.R7, 14+10, asm.R1, asm.Half))
	}
	insns = append(insns,
		asm.LoadMem(asm.R1, asm.R0, 18, asm.Half),
		asm.StoreMem(asm.R7, udpSp, asm.R1, asm.Half),
		asm.LoadMem(asm.R1, asm.R0, 20, asm.Byte),
		asm.StoreMem(asm.R7, rxCtx, asm.R1, asm.Byte),
		asm.LoadMem(asm.R1, asm.R0, 22, asm.Half),
		asm.StoreMem(asm.R7, udpSp+6, asm.R1, asm.Half),
	)
	if tail != nil {
		if r.progs, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1}); err != nil {
			r.Close()
			return nil, err
		}
		insns = append(insns,
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.LoadMapPtr(asm.R2, r.progs.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnTailCall.Call(),
		)
	} else {
		insns = append(insns, asm.Mov.Imm(asm.R0, xdpPass), asm.Return())
	}
	insns = append(insns, asm.Mov.Imm(asm.R0, xdpDrop).WithSymbol("drop"), asm.Return())
	// Multi-buffer aware (BPF_F_XDP_HAS_FRAGS), like the programs it
	// tail-calls: the kernel refuses a tail call between the two kinds.
	if r.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Name: "bench_rewrite", Type: ebpf.XDP, AttachType: ebpf.AttachXDP, License: "GPL",
		Flags: unix.BPF_F_XDP_HAS_FRAGS, Instructions: insns}); err != nil {
		r.Close()
		return nil, fmt.Errorf("rewriter program: %w", err)
	}
	if tail != nil {
		if err := r.progs.Put(uint32(0), tail); err != nil {
			r.Close()
			return nil, fmt.Errorf("rewriter tail call: %w", err)
		}
	}
	return r, nil
}

func (r *rewriter) Close() {
	for _, c := range []interface{ Close() error }{r.prog, r.ctr, r.table, r.progs} {
		if c != nil && !isNilCloser(c) {
			c.Close()
		}
	}
}

func isNilCloser(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *ebpf.Program:
		return v == nil
	case *ebpf.Map:
		return v == nil
	}
	return false
}

// attachXDP attaches p to ifindex (of the calling thread's namespace) in
// native mode.
func attachXDP(p *ebpf.Program, ifindex int) (link.Link, error) {
	return link.AttachXDP(link.XDPOptions{Program: p, Interface: ifindex, Flags: link.XDPDriverMode})
}
