package ep

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wire"
)

// A same-host channel carries datagrams from one sending endpoint to one
// receiving endpoint through shared memory: a single-producer,
// single-consumer ring of fixed-size slots. Its layout (all integers in
// the host's byte order):
//
//	0     sender's line:   tail (uint64, slots published), sender closed (uint32)
//	64    receiver's line: head (uint64, slots consumed), sleeping (uint32), receiver closed (uint32)
//	128   agent's line:    closed by the agent (uint32)
//	4096  slots, each slotSize bytes: length (uint32), 4 bytes unused,
//	      the xdpfab header (wire.HdrLen), the payload
//
// Each side writes only its own line and keeps its own index privately:
// what it reads of the other's is checked before use, and the shape (slot
// count and size) comes from whoever set the channel up, never from the
// memory. Where the message came from is not in the memory at all.
const (
	shmTail      = 0
	shmSClosed   = 8
	shmHead      = 64
	shmSleeping  = 72
	shmRClosed   = 76
	shmAClosed   = 128
	shmSlotsOff  = 4096
	shmSlotHdr   = 8 + wire.HdrLen
	shmSlotAlign = 64

	// ShmSlots is the number of slots of a channel: sends beyond that many
	// unconsumed messages fail with EAGAIN.
	ShmSlots = 128
	// MaxShmMsg bounds a channel's slot payload.
	MaxShmMsg = 1 << 16
)

// shmSlotSize is the slot size for messages of up to maxMsg bytes.
func shmSlotSize(maxMsg int) int {
	return (shmSlotHdr + maxMsg + shmSlotAlign - 1) / shmSlotAlign * shmSlotAlign
}

// shmSize is a channel's size in bytes.
func shmSize(slots, slotSize int) int { return shmSlotsOff + slots*slotSize }

// checkShmShape validates a channel's shape as given by the side that set
// it up, before anything is mapped.
func checkShmShape(slots, slotSize int) error {
	if slots < 1 || slots > 1<<16 || slots&(slots-1) != 0 || slotSize < shmSlotHdr+1 || slotSize > shmSlotSize(MaxShmMsg) || slotSize%shmSlotAlign != 0 {
		return fmt.Errorf("same-host channel of %d slots of %d bytes: %w", slots, slotSize, fi.EINVAL)
	}
	return nil
}

// shmMem is a mapped channel.
type shmMem struct {
	b        []byte
	slots    uint64
	slotSize int
}

func (m *shmMem) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&m.b[off])) }
func (m *shmMem) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&m.b[off])) }

// slot returns slot i's bytes.
func (m *shmMem) slot(i uint64) []byte {
	off := shmSlotsOff + int(i&(m.slots-1))*m.slotSize
	return m.b[off : off+m.slotSize : off+m.slotSize]
}

// put writes one message into slot i (the sender's).
func (m *shmMem) put(i uint64, h wire.Hdr, payload []byte) {
	s := m.slot(i)
	binary.NativeEndian.PutUint32(s, uint32(len(payload)))
	wire.PutHdr(s[8:], h)
	copy(s[shmSlotHdr:], payload)
}

// get reads slot i as the receiver, which trusts nothing in it: the length
// is read once and bounded by the slot, the header copied before it is
// parsed. ok is false for a slot no honest sender writes.
func (m *shmMem) get(i uint64) (h wire.Hdr, payload []byte, ok bool) {
	s := m.slot(i)
	n := int(binary.NativeEndian.Uint32(s))
	if n > len(s)-shmSlotHdr {
		return h, nil, false
	}
	var hb [wire.HdrLen]byte
	copy(hb[:], s[8:])
	if h, ok = wire.ParseHdr(hb[:]); !ok || (h.Op != wire.OpMsg && h.Op != wire.OpTagged) {
		return h, nil, false
	}
	return h, s[shmSlotHdr : shmSlotHdr+n], true
}
