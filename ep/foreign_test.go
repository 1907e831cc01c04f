//go:build linux

package ep_test

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/wire"
	"golang.org/x/sys/unix"
)

// foreignVersion is the metadata version the foreign program writes: none
// of this library's (wire.MetaVersion).
const foreignVersion = 0x7f

// newForeignProg is an XDP program of another xdpfab release, as an
// interface still running it after an upgrade would have (or a hostile
// program of whoever may attach one): it pushes 32 bytes of metadata of
// version foreignVersion in front of every IPv4 UDP frame and redirects
// it into XSKMAP slot slot of xsks, the dataplane's.
func newForeignProg(tb testing.TB, xsks *ebpf.Map, slot uint32) *ebpf.Program {
	tb.Helper()
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, 4, asm.Word), // ctx->data_end
		asm.LoadMem(asm.R3, asm.R6, 0, asm.Word), // ctx->data
		asm.Mov.Reg(asm.R4, asm.R3),
		asm.Add.Imm(asm.R4, 24),
		asm.JGT.Reg(asm.R4, asm.R2, "pass"),
		asm.LoadMem(asm.R4, asm.R3, 12, asm.Half),
		asm.JNE.Imm(asm.R4, 0x0008, "pass"), // ETH_P_IP, network order
		asm.LoadMem(asm.R4, asm.R3, 23, asm.Byte),
		asm.JNE.Imm(asm.R4, unix.IPPROTO_UDP, "pass"),
		// bpf_xdp_adjust_head(ctx, -wire.MetaLen)
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, -wire.MetaLen),
		asm.FnXdpAdjustHead.Call(),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R2, asm.R6, 4, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, 0, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R3),
		asm.Add.Imm(asm.R4, wire.MetaLen),
		asm.JGT.Reg(asm.R4, asm.R2, "pass"),
		// Bytes 28..31 of the metadata: family 0, version, rx context 0.
		asm.StoreImm(asm.R3, 28, foreignVersion<<8, asm.Word),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.Mov.Imm(asm.R2, int32(slot)),
		asm.Mov.Imm(asm.R3, 1), // XDP_DROP when the slot is empty
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"), // XDP_PASS
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "test_foreign", Type: ebpf.XDP, License: "GPL", Instructions: insns})
	if err != nil {
		tb.Fatalf("load the foreign XDP program: %v", err)
	}
	tb.Cleanup(func() { prog.Close() })
	return prog
}

// Frames of another program (metadata of another version) that reach an
// endpoint's socket are counted as unreadable, never delivered, never
// held: many times more of them than the endpoint has frames arrive, and
// afterwards, with xdpfab's program back, the endpoint receives as before
// (nothing leaked).
func TestForeignFramesUnreadable(t *testing.T) {
	const frames = 256
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Frames, a.RingSize = frames, 64 }})
	to := r.a.insert(t, r.b.local)
	r.b.insert(t, r.a.local)

	var val bpf.EPVal
	if err := r.dp.EP.Lookup(bpf.EPKey{Local: bpf.MakeAddr(r.b.local)}, &val); err != nil {
		t.Fatalf("B's endpoint in the endpoint map: %v", err)
	}
	foreign := newForeignProg(t, r.dp.XSKs, val.XskBase)
	if err := r.b.att.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := r.b.h.AttachXDP(foreign)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

	buf := make([]byte, 2048)
	if err := r.b.ep.Recv(buf, fi.AddrUnspec, nil); err != nil {
		t.Fatal(err)
	}
	const sent = 4 * frames
	msg := []byte("not for this release")
	var ent [1]cq.Entry
	for i := range sent {
		send(t, r.a, func() error { return r.a.ep.Inject(msg, to) })
		if n, err := r.b.rx.Read(ent[:]); n != 0 || !errors.Is(err, fi.EAGAIN) {
			t.Fatalf("after foreign frame %d: B read %d completions, %v; want none (EAGAIN)", i, n, err)
		}
	}
	if got := r.b.ep.RecvStats().Unreadable; got != sent {
		t.Fatalf("B counted %d unreadable frames, want %d", got, sent)
	}

	// xdpfab's program back: the posted receive takes the next message.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.b.h.Do(func() error {
		att, err := r.dp.Attach(testbed.LinkName, 0)
		if err == nil {
			t.Cleanup(func() { att.Close() })
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	send(t, r.a, func() error { return r.a.ep.Inject([]byte("for this release"), to) })
	e, src, ee := read(t, r.b.rx)
	if ee != nil {
		t.Fatalf("error completion: %v", ee.Err)
	}
	if string(buf[:e.Len]) != "for this release" || src != 0 {
		t.Fatalf("B received %q from fi_addr %v, want %q from 0", buf[:e.Len], src, "for this release")
	}
	if got := r.b.ep.RecvStats().Unreadable; got != sent {
		t.Fatalf("B counted %d unreadable frames after the valid one, want %d", got, sent)
	}
}
