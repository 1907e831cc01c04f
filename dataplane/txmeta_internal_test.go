package dataplane

import (
	"encoding/binary"
	"math"
	"testing"
)

// TxChecksum writes the kernel's struct xsk_tx_metadata in front of a
// packet only for a UMEM registered with TX metadata and an address with
// room for it in its frame; anything else is refused, never a panic or a
// write outside the frame.
func TestTxChecksum(t *testing.T) {
	u, err := NewUMEM(UMEMConfig{NumFrames: 16, TxMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if u.TxOffset() != 0 || u.TxChecksum(TxMetadataLen, 34, 6) {
		t.Fatal("an unregistered UMEM offered TX metadata")
	}
	u.txmd.Store(true) // as registration with the kernel's consent leaves it
	fs := uint64(u.FrameSize())
	for _, addr := range []uint64{0, TxMetadataLen - 1, fs + 3, 16 * fs, 16*fs + TxMetadataLen, math.MaxUint64} {
		if u.TxChecksum(addr, 34, 6) {
			t.Errorf("TxChecksum(%#x) accepted", addr)
		}
	}
	addr := 2*fs + TxMetadataLen
	if u.TxOffset() != TxMetadataLen || !u.TxChecksum(addr, 34, 6) {
		t.Fatal("TxChecksum refused a packet at the TX offset")
	}
	m := u.mem[addr-TxMetadataLen : addr]
	if binary.NativeEndian.Uint64(m) != txmdFlagsChecksum || binary.NativeEndian.Uint16(m[8:]) != 34 ||
		binary.NativeEndian.Uint16(m[10:]) != 6 || binary.NativeEndian.Uint64(m[16:]) != 0 {
		t.Errorf("metadata %x", m)
	}
}
