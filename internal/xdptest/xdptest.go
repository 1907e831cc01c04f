// Package xdptest runs xdpfab's XDP program through BPF_PROG_TEST_RUN for
// tests and benchmarks: it answers "what would XDP translate this source
// to right now", from the real program and the real maps.
package xdptest

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
)

// Probe endpoints: local addresses no test host uses.
var (
	ProbeLocal4 = netip.MustParseAddrPort("198.19.255.254:47999")
	ProbeLocal6 = netip.MustParseAddrPort("[2001:2:ffff::fe]:47999")
)

// Result is one test run of the program.
type Result struct {
	Verdict uint32
	// Meta is valid when HasMeta: the program wrote metadata.
	Meta    wire.Meta
	HasMeta bool
	// Frame is the frame after the run (after the metadata).
	Frame []byte
}

// Run feeds frame to the program once, as if it arrived on rx queue 0.
func Run(dp *loader.Objects, f []byte) (Result, error) { return RunQueue(dp, f, bpf.XDPMD{}) }

// RunQueue feeds frame to the program once with the given context (the
// kernel needs IngressIfindex, of a device in the calling thread's network
// namespace, for any RxQueueIndex but 0).
func RunQueue(dp *loader.Objects, f []byte, ctx bpf.XDPMD) (Result, error) {
	return RunProgram(dp.Program, f, ctx)
}

// RunProgram is RunQueue with a program of the dataplane's own choosing
// (loader.Objects.ProgramFor: the generic-mode copy).
func RunProgram(prog *ebpf.Program, f []byte, ctx bpf.XDPMD) (Result, error) {
	var ctxOut bpf.XDPMD
	ctx.DataEnd = uint32(len(f))
	opts := &ebpf.RunOptions{
		Data: f, DataOut: make([]byte, len(f)+256), Context: ctx, ContextOut: &ctxOut,
	}
	ret, err := prog.Run(opts)
	if err != nil {
		return Result{}, fmt.Errorf("test run: %w", err)
	}
	// The output is the linear part and the fragments (data_size_out). The
	// program grows a frame at its head only to push the metadata in front
	// of it (and a stamp between the two): a frame that came out at least
	// wire.MetaLen longer than it went in starts with the metadata.
	out := opts.DataOut
	r := Result{Verdict: ret, Frame: out}
	if len(out) >= len(f)+wire.MetaLen {
		r.Meta, r.HasMeta = wire.ParseMeta(out[:wire.MetaLen])
		r.Frame = out[wire.MetaLen:]
	}
	return r, nil
}

// Translate installs a probe endpoint bound to AV avID (replacing any
// previous probe), sends the program one datagram from src, and returns
// the metadata it wrote. known is false when the source is not in the AV.
func Translate(dp *loader.Objects, avID uint32, src netip.AddrPort) (m wire.Meta, known bool, err error) {
	local := ProbeLocal4
	if !src.Addr().Unmap().Is4() {
		local = ProbeLocal6
	}
	key := bpf.EPKey{Local: bpf.MakeAddr(local)}
	if err := PutEndpoint(dp, key, bpf.EPVal{EpId: 0xfffe, AvId: avID, RxCtxs: 1, Queues: 1}); err != nil {
		return m, false, fmt.Errorf("install probe endpoint: %w", err)
	}
	defer DeleteEndpoint(dp, key)
	r, err := Run(dp, wire.Build(wire.Frame{Src: src, Dst: local, Hdr: wire.Hdr{Op: wire.OpMsg}}))
	if err != nil {
		return m, false, err
	}
	if !r.HasMeta {
		return m, false, fmt.Errorf("program wrote no metadata (verdict %d)", r.Verdict)
	}
	return r.Meta, r.Meta.Flags&wire.MetaKnown != 0, nil
}

// PutEndpoint puts endpoint k into dp's endpoint table and index
// (loader.Objects.PutEndpoint under the dataplane lock).
func PutEndpoint(dp *loader.Objects, k bpf.EPKey, v bpf.EPVal) error {
	unlock := dp.Lock()
	defer unlock()
	return dp.PutEndpoint(k, v, ebpf.UpdateAny)
}

// DeleteEndpoint removes endpoint k from dp's endpoint table and index.
func DeleteEndpoint(dp *loader.Objects, k bpf.EPKey) error {
	unlock := dp.Lock()
	defer unlock()
	return dp.DeleteEndpoint(k)
}
