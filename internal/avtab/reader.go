package avtab

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/wire"
)

// Reader reads one mapped table without locks, without locked
// instructions and without system calls: fi_av_lookup, the transmit
// path's Resolve and same-host SourceOf, from any goroutine, while writers
// (this process's, under the dataplane lock, or another process's) change
// the table. Every read of a slot is a sequence-number read, as XDP's: it
// never returns one entry's address with another's index or user ID. A
// read that finds nothing, or a slot that kept changing, reports false:
// the caller then asks the slow way (under the locks).
//
// A Reader is immutable, and safe to use after its Table is closed: Close
// replaces the table's pages by zeros (where nothing is found) and the
// address range is given back only once no Reader refers to it (the
// region's cleanup). Each read keeps its Reader alive until it is done
// (runtime.KeepAlive).
type Reader struct {
	hdr   *bpf.AVHdr
	slots []bpf.AVSlot
	aux   []bpf.AVAux
	pos   []uint32 // per index: a hint of its slot, + 1 (0: none); see read
	reg   *region
	hints *region // pos's memory, when not the Go heap's
	// A copy's: its published change stamp and the value it was made at
	// (Table.SetStamp).
	copy  bool
	stamp *uint64
	at    uint64
}

// noHint as setHint's slot: the index has none (its hint becomes 0).
const noHint = ^uint32(0)

// readTries bounds a Reader's retries of a slot that is being written: a
// write is a few stores, so more retries mean the writer was preempted or
// died inside one, and the caller's slow way (which waits for the
// dataplane lock) is the better wait.
const readTries = 4

// Retired reports whether the table was replaced (growth) or deleted: the
// current table, if any, is another one. For a copy, also whether it is
// stale (Table.SetStamp): the lock-free way must not answer from it.
func (r *Reader) Retired() bool {
	v := atomic.LoadUint32(&r.hdr.Retired) != 0 || r.copy && (r.stamp == nil || atomic.LoadUint64(r.stamp) != r.at)
	runtime.KeepAlive(r)
	return v
}

// read reads the slot index idx names: its address words and its port,
// family and flags word (struct av_slot's bytes 24..27), ok when the slot
// was stable (the same even sequence number before and after) and holds
// idx. A slot holds an index only while the index is in use: an insert
// writes the index's entry before the slot, a remove empties the slot
// before it frees the index, a move fills the new slot before it empties
// the old one. So any slot that holds idx will do, however it was found:
// a stale hint costs a second read, never a wrong answer.
func (r *Reader) read(idx uint32) (a0, a1 uint64, pf uint32, ok bool) {
	if idx >= uint32(len(r.pos)) || idx >= uint32(len(r.aux)) {
		return 0, 0, 0, false
	}
	// The index's slot as this process last wrote or read it (a hint in
	// the Go heap, 4 bytes per index, so mostly in cache: the lookup
	// makes one cache miss, in the slot), checked by the slot's contents;
	// else the table's own record (aux: 16 bytes per index, a second,
	// dependent miss), which becomes the hint. Another process's writes
	// (a named AV) leave hints stale until the next read here.
	hint := &r.pos[idx]
	h := atomic.LoadUint32(hint) - 1
	if h < uint32(len(r.slots)) {
		if a0, a1, pf, ok = readSlot(&r.slots[h], idx); ok {
			return a0, a1, pf, true
		}
	}
	pos := atomic.LoadUint32(&r.aux[idx].Slot)
	if pos >= uint32(len(r.slots)) {
		return 0, 0, 0, false
	}
	if a0, a1, pf, ok = readSlot(&r.slots[pos], idx); ok && pos != h {
		storeHint(hint, pos+1)
	}
	return a0, a1, pf, ok
}

// readSlot reads slot p, ok when it was stable and holds idx.
func readSlot(p *bpf.AVSlot, idx uint32) (a0, a1 uint64, pf uint32, ok bool) {
	a := (*[2]uint64)(unsafe.Pointer(&p.Addr))
	// Atomic loads: on arm64 (LDAR) they keep their order; on amd64
	// they are plain moves that neither the compiler nor the CPU
	// reorders with each other (see docs/platform.md).
	seq := atomic.LoadUint32(&p.Seq)
	fa := atomic.LoadUint32(&p.FiAddr)
	a0, a1 = atomic.LoadUint64(&a[0]), atomic.LoadUint64(&a[1])
	pf = atomic.LoadUint32((*uint32)(unsafe.Pointer(&p.Port)))
	if seq&1 != 0 || atomic.LoadUint32(&p.Seq) != seq {
		return readAgain(p, idx)
	}
	return a0, a1, pf, fa == idx && familyOK(pf)
}

// readAgain is read's retry of a slot that was being written.
func readAgain(p *bpf.AVSlot, idx uint32) (a0, a1 uint64, pf uint32, ok bool) {
	a := (*[2]uint64)(unsafe.Pointer(&p.Addr))
	for range readTries {
		seq := atomic.LoadUint32(&p.Seq)
		fa := atomic.LoadUint32(&p.FiAddr)
		a0, a1 = atomic.LoadUint64(&a[0]), atomic.LoadUint64(&a[1])
		pf = atomic.LoadUint32((*uint32)(unsafe.Pointer(&p.Port)))
		if seq&1 == 0 && atomic.LoadUint32(&p.Seq) == seq {
			return a0, a1, pf, fa == idx && familyOK(pf)
		}
		runtime.Gosched()
	}
	return 0, 0, 0, false
}

// familyOK reports whether av_slot's port, family and flags word holds
// AF_INET or AF_INET6 (0: a free slot).
func familyOK(pf uint32) bool {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], pf)
	return b[2] == wire.AFInet || b[2] == wire.AFInet6
}

// Addr returns the source index idx names; false when idx is not in use
// (or its slot kept changing).
func (r *Reader) Addr(idx uint32) (bpf.Addr, bool) {
	a0, a1, pf, ok := r.read(idx)
	runtime.KeepAlive(r)
	if !ok {
		return bpf.Addr{}, false
	}
	var out bpf.Addr
	binary.NativeEndian.PutUint64(out.Addr[0:8], a0)
	binary.NativeEndian.PutUint64(out.Addr[8:16], a1)
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], pf)
	out.Port = binary.NativeEndian.Uint16(b[0:2])
	out.Family = b[2]
	return out, true
}

// Sockaddr writes the address index idx names into buf in libfabric's
// FI_SOCKADDR_IN or FI_SOCKADDR_IN6 form (struct sockaddr_in, 16 bytes, or
// sockaddr_in6, 28 bytes, as fi.EncodeSockaddr), truncated to len(buf), and
// returns its full length; false when idx is not in use (or its slot kept
// changing). Nothing past the address is written.
//
// The common case (the index's slot as hinted, stable, a buffer that holds
// the address) is one function of straight-line code: the fewer
// instructions a lookup takes, the more lookups the CPU has in flight,
// and the more of their cache misses overlap; and one cache miss, in the
// slot (see read).
func (r *Reader) Sockaddr(idx uint32, buf []byte) (int, bool) {
	if pos, slots := r.pos, r.slots; idx < uint32(len(pos)) {
		if h := atomic.LoadUint32(&pos[idx]) - 1; h < uint32(len(slots)) {
			p := &slots[h]
			a := (*[2]uint64)(unsafe.Pointer(&p.Addr))
			seq := atomic.LoadUint32(&p.Seq)
			fa := atomic.LoadUint32(&p.FiAddr)
			a0, a1 := atomic.LoadUint64(&a[0]), atomic.LoadUint64(&a[1])
			pf := atomic.LoadUint32((*uint32)(unsafe.Pointer(&p.Port)))
			if seq&1 == 0 && atomic.LoadUint32(&p.Seq) == seq && fa == idx {
				fam := pf >> 16 & 0xff
				head := uint64(fam | pf<<16)
				switch {
				case fam == wire.AFInet && len(buf) >= 16:
					binary.LittleEndian.PutUint64(buf[0:8], head|a0<<32)
					binary.LittleEndian.PutUint64(buf[8:16], 0)
					runtime.KeepAlive(r)
					return 16, true
				case fam == wire.AFInet6 && len(buf) >= 28:
					binary.LittleEndian.PutUint64(buf[0:8], head)
					binary.LittleEndian.PutUint64(buf[8:16], a0)
					binary.LittleEndian.PutUint64(buf[16:24], a1)
					binary.LittleEndian.PutUint32(buf[24:28], 0)
					runtime.KeepAlive(r)
					return 28, true
				}
			}
		}
	}
	return r.sockaddr(idx, buf)
}

// sockaddr is Sockaddr's way for everything but the common case.
func (r *Reader) sockaddr(idx uint32, buf []byte) (int, bool) {
	a0, a1, pf, ok := r.read(idx)
	runtime.KeepAlive(r)
	if !ok {
		return 0, false
	}
	// Package bpf, hence this one, builds for little-endian hosts only:
	// pf holds the port's two bytes as the wire has them (network order),
	// then the family. sockaddr's first word is the family in host
	// order, then those two port bytes; then the address.
	fam := pf >> 16 & 0xff
	head := uint64(fam | pf<<16)
	var sa [28]byte
	n := 16
	if fam == wire.AFInet {
		// sin_addr, then 8 bytes of sin_zero.
		binary.LittleEndian.PutUint64(sa[0:8], head|a0<<32)
	} else {
		// sin6_flowinfo 0, sin6_addr, sin6_scope_id 0.
		binary.LittleEndian.PutUint64(sa[0:8], head)
		binary.LittleEndian.PutUint64(sa[8:16], a0)
		binary.LittleEndian.PutUint64(sa[16:24], a1)
		n = 28
	}
	copy(buf, sa[:n])
	return n, true
}

// Find is XDP's forward lookup: the slot holding src and, read under the
// same sequence number, its index's user ID; false when src is not in
// the table. A lookup that missed while entries moved between buckets
// looks again, as XDP does.
func (r *Reader) Find(src *bpf.Addr) (s bpf.AVSlot, userID uint64, ok bool) {
	s, userID, ok = r.find(src)
	runtime.KeepAlive(r)
	return s, userID, ok
}

func (r *Reader) find(src *bpf.Addr) (s bpf.AVSlot, userID uint64, ok bool) {
	nb := uint32(len(r.slots) / 2)
	if nb == 0 {
		return s, 0, false
	}
	b1, b2 := bpf.AVBuckets(hashAddr(atomic.LoadUint64(&r.hdr.Seed), src), nb)
	for try := 0; try < 1000; try++ {
		moves := atomic.LoadUint32(&r.hdr.Moves)
		for _, pos := range [4]uint32{2 * b1, 2*b1 + 1, 2 * b2, 2*b2 + 1} {
			if s, userID, ok := r.readSlotUser(pos); ok && s.Family != 0 && s.Family == src.Family && s.Port == src.Port && s.Addr == src.Addr {
				return s, userID, true
			}
		}
		if moves&1 == 0 && atomic.LoadUint32(&r.hdr.Moves) == moves {
			break
		}
	}
	return s, 0, false
}

// readSlotUser reads slot pos and its index's user ID under the slot's
// sequence number (Update changes both under it).
func (r *Reader) readSlotUser(pos uint32) (s bpf.AVSlot, userID uint64, ok bool) {
	p := &r.slots[pos]
	a := (*[2]uint64)(unsafe.Pointer(&p.Addr))
	for range 1000 {
		seq := atomic.LoadUint32(&p.Seq)
		if seq&1 != 0 {
			continue
		}
		s.FiAddr = atomic.LoadUint32(&p.FiAddr)
		binary.NativeEndian.PutUint64(s.Addr[0:8], atomic.LoadUint64(&a[0]))
		binary.NativeEndian.PutUint64(s.Addr[8:16], atomic.LoadUint64(&a[1]))
		pf := atomic.LoadUint32((*uint32)(unsafe.Pointer(&p.Port)))
		s.AuthKey = atomic.LoadUint32(&p.AuthKey)
		userID = 0
		if s.FiAddr < uint32(len(r.aux)) {
			userID = atomic.LoadUint64(&r.aux[s.FiAddr].UserId)
		}
		if atomic.LoadUint32(&p.Seq) != seq {
			continue
		}
		s.Seq = seq
		unpackPort(&s, pf)
		return s, userID, true
	}
	return s, 0, false
}
