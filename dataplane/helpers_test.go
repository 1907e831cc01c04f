//go:build linux

package dataplane_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"golang.org/x/sys/unix"
)

// The test XDP program pushes metaLen bytes of metadata in front of every
// packet (bpf_xdp_adjust_head: metaMagic, then the ingress ifindex, both
// host-endian u32), so that they are a descriptor's first bytes, and
// redirects it into the XSKMAP slot of its rx queue index, passing it to
// the stack when the slot is empty. (bpf_xdp_adjust_meta's area in front
// of the descriptor would be the other way, but some kernels refuse that
// helper to XDP programs.)
const (
	metaLen   = 8
	metaMagic = 0x78647066
)

type redirectProg struct {
	prog *ebpf.Program
	xsks *ebpf.Map
}

func newRedirectProg(tb testing.TB) redirectProg { return newRedirectProgFlags(tb, 0) }

// newRedirectProgFlags is newRedirectProg with program flags (for one,
// BPF_F_XDP_HAS_FRAGS: the program takes multi-buffer frames).
func newRedirectProgFlags(tb testing.TB, flags uint32) redirectProg {
	tb.Helper()
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "test_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 16,
	})
	if err != nil {
		tb.Fatalf("xskmap: %v", err)
	}
	tb.Cleanup(func() { xsks.Close() })
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		// IPv4 UDP only: the tests send nothing else, and the kernel's own
		// frames (IPv6 neighbour discovery) would otherwise count as theirs
		// where frames are injected for real (testbed.Host.Inject).
		asm.LoadMem(asm.R2, asm.R6, 4, asm.Word), // ctx->data_end
		asm.LoadMem(asm.R3, asm.R6, 0, asm.Word), // ctx->data
		asm.Mov.Reg(asm.R4, asm.R3),
		asm.Add.Imm(asm.R4, 24),
		asm.JGT.Reg(asm.R4, asm.R2, "pass"),
		asm.LoadMem(asm.R4, asm.R3, 12, asm.Half),
		asm.JNE.Imm(asm.R4, 0x0008, "pass"), // ETH_P_IP, network order
		asm.LoadMem(asm.R4, asm.R3, 23, asm.Byte),
		asm.JNE.Imm(asm.R4, unix.IPPROTO_UDP, "pass"),
		// bpf_xdp_adjust_head(ctx, -metaLen)
		asm.Mov.Imm(asm.R2, -metaLen),
		asm.FnXdpAdjustHead.Call(),
		asm.JNE.Imm(asm.R0, 0, "redirect"),
		// Packet pointers must be reloaded after the helper.
		asm.LoadMem(asm.R2, asm.R6, 4, asm.Word), // ctx->data_end
		asm.LoadMem(asm.R3, asm.R6, 0, asm.Word), // ctx->data
		asm.Mov.Reg(asm.R4, asm.R3),
		asm.Add.Imm(asm.R4, metaLen),
		asm.JGT.Reg(asm.R4, asm.R2, "redirect"),
		asm.StoreImm(asm.R3, 0, metaMagic, asm.Word),
		asm.LoadMem(asm.R5, asm.R6, 12, asm.Word), // ctx->ingress_ifindex
		asm.StoreMem(asm.R3, 4, asm.R5, asm.Word),
		// bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)
		asm.LoadMem(asm.R2, asm.R6, 16, asm.Word).WithSymbol("redirect"),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.Mov.Imm(asm.R3, 2),
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"), // XDP_PASS
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "test_xsk_meta", Type: ebpf.XDP, License: "GPL", Instructions: insns, Flags: flags,
	})
	if err != nil {
		tb.Fatalf("load XDP program: %v", err)
	}
	tb.Cleanup(func() { prog.Close() })
	return redirectProg{prog: prog, xsks: xsks}
}

// insert puts s into the XSKMAP slot of its queue.
func (p redirectProg) insert(tb testing.TB, s *dataplane.Socket) {
	tb.Helper()
	if err := p.xsks.Update(uint32(s.Queue()), uint32(s.FD()), ebpf.UpdateAny); err != nil {
		tb.Fatalf("xskmap update: %v", err)
	}
}

// inject makes the program see frame repeat times as if frame had
// arrived on h's interface, queue 0 (testbed.Host.Inject).
func (p redirectProg) inject(h *testbed.Host, frame []byte, repeat int) error {
	return h.Inject(p.prog, frame, repeat)
}

// openIn opens an AF_XDP socket on h's interface from inside h's namespace
// and closes it at the end of the test.
func openIn(tb testing.TB, h *testbed.Host, queue int, u *dataplane.UMEM, cfg dataplane.SocketConfig) *dataplane.Socket {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(tb)
	}
	var s *dataplane.Socket
	err := h.Do(func() (err error) {
		s, err = dataplane.Open(h.Ifindex, queue, u, cfg)
		return err
	})
	if err != nil {
		tb.Fatalf("open in %s: %v", h.Name(), err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	return s
}

func newUMEM(tb testing.TB, cfg dataplane.UMEMConfig) *dataplane.UMEM {
	tb.Helper()
	u, err := dataplane.NewUMEM(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := u.Close(); err != nil {
			tb.Errorf("umem close: %v", err)
		}
	})
	return u
}

// udp4Frame builds an Ethernet/IPv4/UDP frame with valid IP and UDP
// checksums.
func udp4Frame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.AddrPort, payload []byte) []byte {
	f := make([]byte, 14+20+8+len(payload))
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8] = 64
	ip[9] = unix.IPPROTO_UDP
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	binary.BigEndian.PutUint16(ip[10:], ^csum(0, ip))
	udp := f[34:]
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	copy(udp[8:], payload)
	var pseudo [12]byte
	copy(pseudo[0:4], s4[:])
	copy(pseudo[4:8], d4[:])
	pseudo[9] = unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(pseudo[10:], uint16(len(udp)))
	sum := ^csum(uint32(csum(0, pseudo[:])), udp)
	if sum == 0 {
		sum = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], sum)
	return f
}

func csum(acc uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		acc += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		acc += uint32(b[len(b)-1]) << 8
	}
	for acc > 0xffff {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}

// udp4Payload returns the UDP payload of an IPv4 frame to port, or nil; f
// is a received descriptor, metadata first.
func udp4Payload(f []byte, port uint16) []byte {
	if len(f) < metaLen {
		return nil
	}
	f = f[metaLen:]
	if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != unix.IPPROTO_UDP {
		return nil
	}
	ihl := int(f[14]&0xf) * 4
	if len(f) < 14+ihl+8 || binary.BigEndian.Uint16(f[14+ihl+2:]) != port {
		return nil
	}
	return f[14+ihl+8:]
}

func checkMeta(tb testing.TB, u *dataplane.UMEM, d dataplane.Desc, ifindex int) {
	tb.Helper()
	m := u.Packet(d)
	if len(m) < metaLen {
		tb.Fatalf("descriptor %#x (%d bytes) is shorter than the metadata", d.Addr, d.Len)
	}
	magic := binary.NativeEndian.Uint32(m[0:])
	ifi := binary.NativeEndian.Uint32(m[4:])
	if magic != metaMagic || ifi != uint32(ifindex) {
		tb.Fatalf("metadata at %#x = %x (magic %#x ifindex %d), want magic %#x ifindex %d",
			d.Addr, m[:metaLen], magic, ifi, metaMagic, ifindex)
	}
}

// counts reads the open fds and the memory mappings of this process.
func counts(tb testing.TB) (fds, maps int) {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		tb.Fatal(err)
	}
	return len(ents), strings.Count(string(b), "\n")
}

// logRecorder is a slog handler keeping every record's message and attrs.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r.Clone())
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) find(msg string) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.recs {
		if strings.Contains(r.Message, msg) {
			out = append(out, r)
		}
	}
	return out
}

// testLogger sends log records to the test's log.
func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// xskMappings counts this process's mappings of AF_XDP rings (shown as
// socket:[inode]) and of shared UMEM memfds (/memfd:xdpfab-umem).
func xskMappings(tb testing.TB) (rings, memfds int) {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		tb.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		switch {
		case strings.Contains(l, " socket:["):
			rings++
		case strings.Contains(l, "/memfd:xdpfab-umem"):
			memfds++
		}
	}
	return rings, memfds
}

// xskFDs lists this process's descriptors of shared UMEM memfds and of the
// sockets with the given inode numbers (their /proc/self/fd links). Unlike
// a count of all descriptors it ignores the namespace handles that
// testbed's helper threads close a moment after returning.
func xskFDs(tb testing.TB, inos ...uint64) []string {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the ReadDir descriptor itself, gone by now
		}
		hit := strings.Contains(l, "/memfd:xdpfab-umem")
		for _, ino := range inos {
			hit = hit || l == fmt.Sprintf("socket:[%d]", ino)
		}
		if hit {
			out = append(out, e.Name()+" -> "+l)
		}
	}
	return out
}

// inode is the inode number of fd's file.
func inode(tb testing.TB, fd int) uint64 {
	tb.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		tb.Fatal(err)
	}
	return st.Ino
}
