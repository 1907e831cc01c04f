package ep

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
)

// What the agent holds of same-host channels it sets up between endpoints
// of its clients: the channel's memfd and a view of its control lines (to
// close it when either side goes), and each receiving endpoint's doorbell.

// LocalChannel is a same-host channel as the party that set it up holds
// it.
type LocalChannel struct {
	fd  int
	ctl shmMem // the first page only
}

// NewLocalChannel creates a channel for messages of up to maxMsg bytes: a
// sealed memfd (nobody can shrink it under another process's mapping). It
// returns the channel and its shape (LocalChannelInfo's Slots and
// SlotSize).
func NewLocalChannel(maxMsg int) (*LocalChannel, int, int, error) {
	if maxMsg < 1 || maxMsg > MaxShmMsg {
		return nil, 0, 0, fmt.Errorf("same-host channel for messages of %d bytes: %w", maxMsg, fi.EINVAL)
	}
	slotSize := shmSlotSize(maxMsg)
	fd, err := newSealedMemfd("xdpfab-local", shmSize(ShmSlots, slotSize))
	if err != nil {
		return nil, 0, 0, err
	}
	b, err := mapFD(fd, shmSlotsOff)
	if err != nil {
		closeFD(fd)
		return nil, 0, 0, fmt.Errorf("map channel: %w", err)
	}
	return &LocalChannel{fd: fd, ctl: shmMem{b: b}}, ShmSlots, slotSize, nil
}

// FD is the channel's memfd, to hand to both sides (-1 for a nil or zero
// LocalChannel, or once closed).
func (c *LocalChannel) FD() int {
	if c == nil || c.ctl.b == nil {
		return -1
	}
	return c.fd
}

// Shut marks the channel closed for both sides: the sender's next send
// fails over to setting up a new one, the receiver drops it once empty.
func (c *LocalChannel) Shut() {
	if c != nil && c.ctl.b != nil {
		c.ctl.u32(shmAClosed).Store(1)
	}
}

// Close releases the setter's hold; the sides keep their mappings.
func (c *LocalChannel) Close() {
	if c == nil || c.ctl.b == nil {
		return
	}
	unmapShm(c.ctl.b)
	c.ctl.b = nil
	closeFD(c.fd)
}

// Doorbell tells a receiving endpoint that channels were set up towards
// it: a sealed memfd page whose first word counts them, and a wake-up pipe
// written to with each, for a receiver asleep in poll(2). The receiver
// gets the pipe's read end; the doorbell keeps a write end of its own, and
// each sender gets one of its own (Writer).
type Doorbell struct {
	fd, r, w int
	mem      []byte
}

// NewDoorbell creates a doorbell.
func NewDoorbell() (*Doorbell, error) {
	fd, err := newSealedMemfd("xdpfab-doorbell", 4096)
	if err != nil {
		return nil, err
	}
	mem, err := mapFD(fd, 4096)
	if err != nil {
		closeFD(fd)
		return nil, fmt.Errorf("map doorbell: %w", err)
	}
	r, w, err := newWaker()
	if err != nil {
		unmapShm(mem)
		closeFD(fd)
		return nil, err
	}
	return &Doorbell{fd: fd, r: r, w: w, mem: mem}, nil
}

// FDs are the descriptors to hand to the receiver (EnableLocal's order):
// the page's memfd and the wake-up pipe's read end (none for a nil or zero
// Doorbell, or once closed).
func (d *Doorbell) FDs() []int {
	if d == nil || d.mem == nil {
		return nil
	}
	return []int{d.fd, d.r}
}

// Writer opens a write end of the receiver's wake-up pipe for one sender:
// an open file of its own, which the caller owns. Whatever its holder does
// to it (blocking mode included), neither the doorbell's own writes nor
// another sender's can block.
func (d *Doorbell) Writer() (int, error) {
	if d == nil || d.mem == nil {
		return -1, fmt.Errorf("doorbell closed, or not from NewDoorbell: %w", fi.EINVAL)
	}
	return reopenWriter(d.w)
}

// Ring announces a change: the receiver's next progress asks for it.
func (d *Doorbell) Ring() {
	if d == nil || d.mem == nil {
		return
	}
	(*atomic.Uint64)(unsafe.Pointer(&d.mem[0])).Add(1)
	signalFD(d.w)
}

// Close releases the doorbell; the receiver keeps its mapping.
func (d *Doorbell) Close() {
	if d == nil || d.mem == nil {
		return
	}
	unmapShm(d.mem)
	d.mem = nil
	closeFD(d.fd)
	closeFD(d.r)
	closeFD(d.w)
}
