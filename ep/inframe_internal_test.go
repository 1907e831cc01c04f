package ep

import (
	"testing"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/wire"
)

// Every packet's first descriptor moves past the metadata, the rest of a
// chain does not, and a first descriptor too short to hold metadata (no
// frame of xdpfab's program) becomes empty, which frameMsg refuses.
func TestInFrame(t *testing.T) {
	const m = wire.MetaLen
	const cont = uint32(dataplane.PktContd)
	in := []dataplane.Desc{
		{Addr: 4096 + 256, Len: 100},                   // a packet
		{Addr: 2*4096 + 256, Len: 3000, Options: cont}, // a chain's first piece
		{Addr: 3*4096 + 256, Len: 3000, Options: cont}, // ... its middle
		{Addr: 4*4096 + 256, Len: 10},                  // ... its last piece
		{Addr: 5*4096 + 256, Len: m - 1},               // too short
		{Addr: 6*4096 + 256, Len: m},                   // metadata and nothing else
	}
	want := []dataplane.Desc{
		{Addr: 4096 + 256 + m, Len: 100 - m},
		{Addr: 2*4096 + 256 + m, Len: 3000 - m, Options: cont},
		{Addr: 3*4096 + 256, Len: 3000, Options: cont},
		{Addr: 4*4096 + 256, Len: 10},
		{Addr: 5*4096 + 256, Len: 0},
		{Addr: 6*4096 + 256 + m, Len: 0},
	}
	got := append([]dataplane.Desc(nil), in...)
	inFrame(got, true)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("descriptor %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// A batch that starts inside a chain begun in an earlier one.
	got = append([]dataplane.Desc(nil), in[2:4]...)
	inFrame(got, false)
	if got[0] != in[2] || got[1] != in[3] {
		t.Errorf("continued chain moved: %+v", got)
	}
}
