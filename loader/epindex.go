package loader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// The endpoint index (xdpfab_epport and xdpfab_epslot, bpf/xdpfab_maps.h)
// is the XDP program's fast path in front of the endpoint table
// (xdpfab_ep): for a UDP port that at most bpf.EPPerPort endpoints are
// bound to, the port's xdpfab_epport element lists them, 16 bits each
// (1 + the xdpfab_epslot element that holds a copy of the endpoint's key
// and value), those bound to an address before the wildcards, and XDP
// finds the endpoint with array lookups and key checks instead of hashing a
// 24-byte key. Several endpoints on one port are common: containers on one
// node, each in its network namespace, bind the same port, and the
// dataplane is the node's. Every other port's element is 0 and XDP looks
// in the hash table as before: no endpoint, more than the list holds, or
// an index that is not written yet.
//
// xdpfab_ep stays the table of record. Every change to it goes through
// PutEndpoint or DeleteEndpoint, which bring the changed port's index
// entry in step from the hash table's entries for that port, under the
// dataplane lock (so processes sharing pinned maps take turns). XDP checks
// the slot's key (port, family, address or wildcard) against the datagram,
// so an index behind the hash table for a moment (between the two
// updates, in the order below) delivers what the hash table said a moment
// before, as an update of the hash table alone does, and never to an
// endpoint of another port or address.
//
// Concurrency with XDP, which reads both maps without a lock:
//   - a slot is written only while no port element lists it, then
//     linked with one aligned 64-bit store into the port's element (Go's
//     atomic store; XDP reads the element once and the slot through the
//     address it computes from it: a dependent load, ordered on every
//     architecture);
//   - a linked slot never changes: a new value (SetTrace) is a new slot,
//     linked in place of the old;
//   - an unlinked slot is retired, contents kept, and only freed (cleared,
//     then reusable) after a grace period (waitReaders, as for the AV
//     tables): an XDP run that read the old element finishes first. There
//     are twice as many slots as endpoints, so the wait is rare: once per
//     MaxEndpoints retirements at most.
//
// Order: a new or changed entry goes into the hash table first, then the
// index; a removed one leaves the index first, then the hash table. A
// process that dies between the two leaves the index behind the table,
// which costs the hash lookup (or, with a slot written but never linked, a
// slot that the next allocation that runs out of free ones retires and
// frees): the index repairs itself at the port's next change.

// epIndex is this process's view of the endpoint index (mapped at the
// first endpoint change; guarded by the dataplane lock).
type epIndex struct {
	pmem, smem []byte
	port       []uint64     // xdpfab_epport, by local port (host order)
	slots      []bpf.EPSlot // xdpfab_epslot
}

// epPorts is xdpfab_epport's size: every UDP port.
const epPorts = 1 << 16

// PutEndpoint writes endpoint k's entry v into the endpoint table
// (xdpfab_ep; flags as for ebpf.Map.Update, whose errors it returns) and
// brings the endpoint index in step. The caller holds Lock. Every writer
// of the endpoint table uses it or DeleteEndpoint: a bare map update would
// leave the index behind.
func (d *Objects) PutEndpoint(k bpf.EPKey, v bpf.EPVal, flags ebpf.MapUpdateFlags) error {
	if err := d.loaded("loader: put endpoint"); err != nil {
		return err
	}
	x, err := d.epIndexMap()
	if err != nil {
		return err
	}
	if err := d.EP.Update(k, v, flags); err != nil {
		return err
	}
	d.reindexPort(x, k.Local.Port)
	return nil
}

// DeleteEndpoint removes endpoint k from the endpoint index and the
// endpoint table (ebpf.ErrKeyNotExist when the table has no such entry).
// The caller holds Lock.
func (d *Objects) DeleteEndpoint(k bpf.EPKey) error {
	if err := d.loaded("loader: delete endpoint"); err != nil {
		return err
	}
	x, err := d.epIndexMap()
	if err != nil {
		return err
	}
	if x != nil {
		// Out of the index first: XDP must not find the endpoint there
		// once the table has no entry for it.
		d.reindexPortWithout(x, k.Local.Port, &k)
	}
	if err := d.EP.Delete(k); err != nil {
		if x != nil {
			d.reindexPort(x, k.Local.Port) // it was not removed after all
		}
		return err
	}
	return nil
}

// epIndexMap maps the endpoint index on first use; nil without one (a
// dataplane opened read-only, whose endpoint table is not writable
// either).
func (d *Objects) epIndexMap() (*epIndex, error) {
	if d.EPPort == nil || d.EPSlot == nil {
		return nil, nil
	}
	if d.epIdx != nil {
		return d.epIdx, nil
	}
	if d.EPPort.MaxEntries() != epPorts || d.EPPort.ValueSize() != 8 ||
		d.EPSlot.ValueSize() != uint32(unsafe.Sizeof(bpf.EPSlot{})) || d.EPSlot.MaxEntries() == 0 {
		return nil, fmt.Errorf("loader: endpoint index maps of another layout: %w", fi.EINVAL)
	}
	pmem, err := mmapMap(d.EPPort, epPorts*8)
	if err != nil {
		return nil, err
	}
	n := int(d.EPSlot.MaxEntries())
	smem, err := mmapMap(d.EPSlot, n*int(unsafe.Sizeof(bpf.EPSlot{})))
	if err != nil {
		unix.Munmap(pmem)
		return nil, err
	}
	d.epIdx = &epIndex{
		pmem: pmem, smem: smem,
		port:  unsafe.Slice((*uint64)(unsafe.Pointer(&pmem[0])), epPorts),
		slots: unsafe.Slice((*bpf.EPSlot)(unsafe.Pointer(&smem[0])), n),
	}
	return d.epIdx, nil
}

// hostPort is a port as bpf.Addr holds it (network byte order) in host
// order: xdpfab_epport's index.
func hostPort(p uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], p)
	return binary.BigEndian.Uint16(b[:])
}

func mmapMap(m *ebpf.Map, size int) ([]byte, error) {
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("loader: map the endpoint index %v: %w", m, err)
	}
	return mem, nil
}

// unmapEPIndex releases this process's mapping of the index (Close).
func (d *Objects) unmapEPIndex() error {
	x := d.epIdx
	if x == nil {
		return nil
	}
	d.epIdx = nil
	return errors.Join(unix.Munmap(x.pmem), unix.Munmap(x.smem))
}

// reindexPort brings port's index entry (port in network byte order, as
// in bpf.Addr) in step with the endpoint table.
func (d *Objects) reindexPort(x *epIndex, port uint16) { d.reindexPortWithout(x, port, nil) }

// reindexPortWithout is reindexPort as if the table had no entry skip.
// Reading the table may fail (it should not: the caller holds the lock and
// the map is its own); the port then gets no entry, which is always
// right.
func (d *Objects) reindexPortWithout(x *epIndex, port uint16, skip *bpf.EPKey) {
	if x == nil {
		return
	}
	var (
		want []bpf.EPSlot // the port's endpoints, at most EPPerPort
		over bool         // more than that: no entry
		k    bpf.EPKey
		v    bpf.EPVal
	)
	it := d.EP.Iterate()
	for it.Next(&k, &v) {
		if k.Local.Port != port || (skip != nil && k == *skip) {
			continue
		}
		if len(want) == bpf.EPPerPort {
			over = true
			break
		}
		want = append(want, bpf.EPSlot{Local: k.Local, State: bpf.EPSUsed, Val: v})
	}
	if it.Err() != nil || over {
		want = nil
	}
	// Addresses before wildcards (XDP takes the first slot that matches),
	// then a fixed order, so that an unchanged port compares equal.
	slices.SortFunc(want, func(a, b bpf.EPSlot) int {
		if wa, wb := a.Local.Addr == [16]byte{}, b.Local.Addr == [16]byte{}; wa != wb {
			if wb {
				return -1
			}
			return 1
		}
		if c := bytes.Compare(a.Local.Addr[:], b.Local.Addr[:]); c != 0 {
			return c
		}
		return int(a.Local.Family) - int(b.Local.Family)
	})
	p := &x.port[hostPort(port)]
	cur := atomic.LoadUint64(p)
	old := x.refs(cur)
	if len(old) == len(want) && len(want) > 0 {
		same := true
		for i, s := range old {
			same = same && x.slots[s] == want[i]
		}
		if same {
			return // linked already, unchanged
		}
	}
	// New slots for what changed; a linked slot that still holds one of
	// the port's endpoints stays (a linked slot never changes). All are
	// taken before any is written: taking may free used slots no entry
	// lists.
	at := make([]int, len(want))
	need := 0
	for i, w := range want {
		at[i] = -1
		for _, o := range old {
			if x.slots[o] == w {
				at[i] = o
				break
			}
		}
		if at[i] < 0 {
			need++
		}
	}
	var fresh []int
	if need > 0 {
		if fresh = d.allocSlots(x, need); fresh == nil {
			want = nil // out of slots: the port gets no entry
		}
	}
	var next uint64
	for i, w := range want {
		if at[i] < 0 {
			at[i], fresh = fresh[0], fresh[1:]
			x.slots[at[i]] = w
		}
		next |= uint64(at[i]+1) << (16 * i)
	}
	atomic.StoreUint64(p, next)
	for _, o := range old {
		if !x.linkedFrom(next, o) && x.slots[o].State == bpf.EPSUsed {
			x.slots[o].State = bpf.EPSRetired
		}
	}
}

// refs decodes a port entry: the slots it lists, in order (references
// outside the slot array end the list: an entry of another layout).
func (x *epIndex) refs(e uint64) []int {
	var r []int
	for i := range bpf.EPPerPort {
		s := int(e>>(16*i)) & 0xffff
		if s == 0 || s > len(x.slots) {
			break
		}
		r = append(r, s-1)
	}
	return r
}

// linkedFrom reports whether port entry e lists slot s (without the
// slice refs makes: allocSlots asks it for every slot).
func (x *epIndex) linkedFrom(e uint64, s int) bool {
	for i := range bpf.EPPerPort {
		r := int(e>>(16*i)) & 0xffff
		if r == 0 || r > len(x.slots) {
			return false
		}
		if r-1 == s {
			return true
		}
	}
	return false
}

// maxIndexSlots is how many slots a 16-bit reference (1 + the slot) can
// name.
const maxIndexSlots = 0xffff

// allocSlots returns n free slots, or nil (then the port gets no entry).
// Without enough free ones it retires every used slot no port element
// points to (left by a process that died in the middle of a change), waits
// for a grace period and frees the retired ones.
func (d *Objects) allocSlots(x *epIndex, n int) []int {
	var got []int
	for pass := 0; pass < 2; pass++ {
		got = got[:0]
		for i := range x.slots[:min(len(x.slots), maxIndexSlots)] {
			if x.slots[i].State == bpf.EPSFree {
				if got = append(got, i); len(got) == n {
					return got
				}
			}
		}
		if pass > 0 {
			break
		}
		retired := false
		for i := range x.slots {
			s := &x.slots[i]
			if s.State == bpf.EPSUsed && !x.linkedFrom(atomic.LoadUint64(&x.port[hostPort(s.Local.Port)]), i) {
				s.State = bpf.EPSRetired
			}
			retired = retired || s.State == bpf.EPSRetired
		}
		if !retired {
			break
		}
		waitReaders()
		for i := range x.slots {
			if x.slots[i].State == bpf.EPSRetired {
				x.slots[i] = bpf.EPSlot{} // family 0: matches no datagram
			}
		}
	}
	return nil
}
