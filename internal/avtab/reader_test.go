//go:build linux

package avtab

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

func addr6(i int) bpf.Addr {
	return bpf.MakeAddr(netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 1, 14: byte(i >> 8), 15: byte(i)}), uint16(2000+i%11)))
}

// A Reader finds what the writer's table holds: the address of an index
// (as bpf.Addr and as the sockaddr fi.EncodeSockaddr makes, truncated to
// the buffer, nothing written past the address), the source's slot and user
// ID; nothing for free and out-of-range indices.
func TestReaderReads(t *testing.T) {
	dp := load(t)
	w := install(t, dp, 1, 64)
	srcs := []bpf.Addr{addr(1), addr6(2), addr(3)}
	for i, a := range srcs {
		if _, err := w.Place(&a, uint32(i), uint64(100+i), bpf.AVFUserID, uint32(i)); err != nil {
			t.Fatal(err)
		}
	}
	w.SetHigh(4) // index 3: below the high mark, free
	r := w.Reader()
	if r == nil || r.Retired() {
		t.Fatalf("reader %v", r)
	}
	for i, a := range srcs {
		if got, ok := r.Addr(uint32(i)); !ok || got != a {
			t.Errorf("Addr(%d) = %v %v, want %v", i, got.AddrPort(), ok, a.AddrPort())
		}
		want := fi.EncodeSockaddr(nil, a.AddrPort())
		for _, size := range []int{0, 3, 16, 20, 28, 40} {
			buf := bytes.Repeat([]byte{0xaa}, size)
			n, ok := r.Sockaddr(uint32(i), buf)
			k := min(size, len(want))
			if !ok || n != len(want) || !bytes.Equal(buf[:k], want[:k]) || bytes.Count(buf[k:], []byte{0xaa}) != size-k {
				t.Errorf("Sockaddr(%d) into %d bytes = %d %v %x, want %d %x", i, size, n, ok, buf, len(want), want)
			}
		}
		s, uid, ok := r.Find(&a)
		if !ok || s.FiAddr != uint32(i) || uid != uint64(100+i) || s.AuthKey != uint32(i) || s.Flags != bpf.AVFUserID {
			t.Errorf("Find(%v) = %+v %d %v", a.AddrPort(), s, uid, ok)
		}
	}
	for _, idx := range []uint32{3, 4, w.Cap(), 1 << 31} {
		if got, ok := r.Addr(idx); ok {
			t.Errorf("Addr(%d) of a free index = %v", idx, got.AddrPort())
		}
		if n, ok := r.Sockaddr(idx, make([]byte, 28)); ok {
			t.Errorf("Sockaddr(%d) of a free index = %d", idx, n)
		}
	}
	if a := addr(9); true {
		if s, _, ok := r.Find(&a); ok {
			t.Errorf("Find of an absent source = %+v", s)
		}
	}
	// A remove is seen at once, and so is the retirement mark.
	pos, _, _ := w.Find(&srcs[0])
	w.Remove(pos)
	if _, ok := r.Addr(0); ok {
		t.Error("removed index still read")
	}
	w.MarkRetired(true)
	if !r.Retired() {
		t.Error("retirement not seen")
	}
}

// Another process's writes (a second mapping of the table, as a second
// writer of a named AV has) leave the first mapping's slot hints stale: a
// Reader still gives each index's current source, and nothing for a
// removed one.
func TestReaderStaleHints(t *testing.T) {
	dp := load(t)
	w := install(t, dp, 7, 64)
	for i := range 40 {
		a := addr(i)
		if _, err := w.Place(&a, uint32(i), 0, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	w.SetHigh(40)
	r := w.Reader()
	other, err := Open(dp, 7, false)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// The other writer removes every index and puts other sources at the
	// even ones (other slots, by their hash); the odd ones stay free.
	for i := range 40 {
		a := addr(i)
		_, pos, ok := other.Locate(&a)
		if !ok {
			t.Fatalf("%v not in the other mapping", a.AddrPort())
		}
		other.Remove(pos)
	}
	for i := 0; i < 40; i += 2 {
		a := addr6(i)
		if _, err := other.Place(&a, uint32(i), 0, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	stale := 0
	for i := 0; i < 40; i += 2 {
		if _, slot, _ := other.Aux(uint32(i)); r.pos[i] != slot+1 {
			stale++
		}
	}
	if stale == 0 {
		t.Fatal("no hint is stale: the test tests nothing")
	}
	for range 2 { // stale hints, then the hints the first reads wrote
		for i := range 40 {
			got, ok := r.Addr(uint32(i))
			n, sok := r.Sockaddr(uint32(i), make([]byte, 28))
			switch {
			case i%2 == 0 && (!ok || got != addr6(i) || !sok || n != 28):
				t.Errorf("index %d: %v %v (sockaddr %d %v), want %v", i, got.AddrPort(), ok, n, sok, addr6(i).AddrPort())
			case i%2 == 1 && (ok || sok):
				t.Errorf("removed index %d read as %v", i, got.AddrPort())
			}
		}
	}
}

// mapped reports whether this process has memory mapped at p.
func mapped(t *testing.T, p uintptr) bool {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var lo, hi uintptr
		rng, _, _ := strings.Cut(sc.Text(), " ")
		if _, err := fmt.Sscanf(rng, "%x-%x", &lo, &hi); err == nil && p >= lo && p < hi {
			return true
		}
	}
	return false
}

// After Close, a Reader still reading the table finds nothing and never
// faults: the pages read as zeros. The address range is given back once
// no Reader refers to it.
func TestReaderOutlivesClose(t *testing.T) {
	dp := load(t)
	w, err := New(dp, 5, 64)
	if err != nil {
		t.Fatal(err)
	}
	a := addr(1)
	if _, err := w.Place(&a, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	r := w.Reader()
	base := uintptr(r.reg.addr)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Reader() != nil {
		t.Error("a closed table has a reader")
	}
	runtime.GC()
	runtime.GC()
	if _, ok := r.Addr(0); ok {
		t.Error("the closed table's entry still read")
	}
	if _, _, ok := r.Find(&a); ok {
		t.Error("the closed table's source still found")
	}
	if !mapped(t, base) {
		t.Fatal("the range went while a Reader refers to it")
	}
	runtime.KeepAlive(r)
	r = nil
	deadline := time.Now().Add(5 * time.Second)
	for mapped(t, base) {
		if time.Now().After(deadline) {
			t.Fatal("the range is still mapped with no Reader left")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// Readers on other goroutines while the writer removes and re-places
// every index with one of two sources, then closes the table: a read
// gives an index's own source or nothing, never a fault and never another
// index's source (the sequence numbers), and Find gives a source's own
// index.
func TestReaderConcurrentWriter(t *testing.T) {
	dp := load(t)
	w, err := New(dp, 6, 256)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	src := func(i, v int) bpf.Addr {
		if v == 0 {
			return addr(i)
		}
		return addr6(i)
	}
	for i := range n {
		a := src(i, 0)
		if _, err := w.Place(&a, uint32(i), uint64(i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	r := w.Reader()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	errs := make(chan string, 4)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 28)
			for k := g; !stop.Load(); k++ {
				i := k % n
				if got, ok := r.Addr(uint32(i)); ok && got != src(i, 0) && got != src(i, 1) {
					errs <- fmt.Sprintf("index %d read as %v", i, got.AddrPort())
					return
				}
				if m, ok := r.Sockaddr(uint32(i), buf); ok {
					ap, err := fi.DecodeSockaddr(buf[:m])
					if err != nil || (ap != src(i, 0).AddrPort() && ap != src(i, 1).AddrPort()) {
						errs <- fmt.Sprintf("index %d sockaddr %v %v", i, ap, err)
						return
					}
				}
				a := src(i, k&1)
				if s, uid, ok := r.Find(&a); ok && (s.FiAddr != uint32(i) || uid != uint64(i)) {
					errs <- fmt.Sprintf("%v found at index %d user ID %d", a.AddrPort(), s.FiAddr, uid)
					return
				}
				reads.Add(1)
			}
		}()
	}
	for round := 1; round <= 50; round++ {
		for i := range n {
			old, nw := src(i, (round-1)&1), src(i, round&1)
			_, pos, ok := w.Locate(&old)
			if !ok {
				t.Fatalf("round %d: %v not in the table", round, old.AddrPort())
			}
			w.Remove(pos)
			if _, err := w.Place(&nw, uint32(i), uint64(i), 0, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Error(err)
	}
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	t.Logf("%d reads", reads.Load())
}

// A copy of a table (what a process that cannot map it reads) has a Reader
// too: lock-free lookups through an application's view cost no system call
// and no lock. It reads the copy as the last Refresh made it; a refresh
// makes a new Reader, and the old one keeps reading the old copy.
func TestCopyReader(t *testing.T) {
	dp := load(t)
	w := install(t, dp, 4, 64)
	a, b := addr(1), addr6(2)
	if _, err := w.Place(&a, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	w.SetHigh(1)
	c, err := copyTable(w.Map())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.layout(); err != nil {
		t.Fatal(err)
	}
	r := c.Reader()
	if !c.Copied() || r == nil {
		t.Fatalf("copy %v, reader %v", c.Copied(), r)
	}
	if got, ok := r.Addr(0); !ok || got != a {
		t.Fatalf("copy's reader: %v %v", got.AddrPort(), ok)
	}
	if _, err := w.Place(&b, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	w.SetHigh(2)
	if _, ok := r.Addr(1); ok {
		t.Error("the copy's reader saw an insert made after the copy")
	}
	if err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	r2 := c.Reader()
	if got, ok := r2.Addr(1); r2 == r || !ok || got != b {
		t.Errorf("after Refresh: new reader %v, %v %v", r2 != r, got.AddrPort(), ok)
	}
	if got, ok := r.Addr(0); !ok || got != a {
		t.Errorf("the old reader after Refresh: %v %v", got.AddrPort(), ok)
	}
}

// A large table's slot hints live in a mapping of their own, advised into
// huge pages: the Reader reads through them, the mapping is counted
// (HintBytes) and given back once no Table or Reader refers to it.
func TestHugeHints(t *testing.T) {
	dp := load(t)
	before := HintBytes()
	w, err := New(dp, 6, hugeHints)
	if err != nil {
		t.Fatal(err)
	}
	if got := HintBytes() - before; got != hugePage {
		t.Errorf("a table of %d indices maps %d bytes of hints, want %d", hugeHints, got, hugePage)
	}
	for i := range 64 {
		a := addr(i)
		if _, err := w.Place(&a, uint32(i*8191), uint64(i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	r := w.Reader()
	for i := range 64 {
		if got, ok := r.Addr(uint32(i * 8191)); !ok || got != addr(i) {
			t.Errorf("index %d reads %v, %v; want %v", i*8191, got.AddrPort(), ok, addr(i).AddrPort())
		}
	}
	base := uintptr(unsafe.Pointer(&r.pos[0]))
	if flags := vmFlags(t, base); !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("the hints' mapping has VmFlags %q, want hg (MADV_HUGEPAGE)", flags)
	}
	w.Close()
	w = nil
	runtime.KeepAlive(r)
	r = nil
	deadline := time.Now().Add(5 * time.Second)
	for mapped(t, base) || HintBytes() != before {
		if time.Now().After(deadline) {
			t.Fatalf("hints still mapped (%d bytes counted) with no Table or Reader left", HintBytes()-before)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// vmFlags returns the VmFlags line of the mapping that holds p
// (/proc/self/smaps).
func vmFlags(t *testing.T, p uintptr) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		var lo, hi uintptr
		if rng, _, _ := strings.Cut(line, " "); strings.Contains(rng, "-") {
			if _, err := fmt.Sscanf(rng, "%x-%x", &lo, &hi); err == nil {
				in = p >= lo && p < hi
				continue
			}
		}
		if v, ok := strings.CutPrefix(line, "VmFlags:"); ok && in {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
