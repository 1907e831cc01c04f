package bpf_test

import (
	"encoding/binary"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/wire"
)

// The Go mirrors of xdpfab_consts.h's #defines (in wire and here) agree
// with the header. The enums need no mirror: bpf2go generates them.
func TestConstsMatchC(t *testing.T) {
	src, err := os.ReadFile("xdpfab_consts.h")
	if err != nil {
		t.Fatal(err)
	}
	c := map[string]int64{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:#define\s+)?(XDPFAB_\w+)\s*=?\s*(0x[0-9a-fA-F]+|\d+)`).FindAllStringSubmatch(string(src), -1) {
		v, err := strconv.ParseInt(m[2], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		c[m[1]] = v
	}
	for name, goVal := range map[string]int64{
		"XDPFAB_MAGIC": wire.Magic, "XDPFAB_VERSION": wire.Version, "XDPFAB_OP_MSG": wire.OpMsg, "XDPFAB_OP_TAGGED": wire.OpTagged,
		"XDPFAB_HF_CQ_DATA": wire.FlagCQData, "XDPFAB_META_KNOWN": wire.MetaKnown, "XDPFAB_META_SOURCE_ERR": wire.MetaSourceErr,
		"XDPFAB_META_USER_ID": wire.MetaUserID, "XDPFAB_META_VERSION": wire.MetaVersion, "XDPFAB_AVF_USER_ID": bpf.AVFUserID,
		"XDPFAB_META_STAMP": wire.MetaStamp, "XDPFAB_EPF_STAMP": bpf.EPFStamp, "XDPFAB_EPF_CHARGED": bpf.EPFCharged, "XDPFAB_STAMP_LEN": wire.StampLen,
		"XDPFAB_AF_INET": wire.AFInet, "XDPFAB_AF_INET6": wire.AFInet6, "XDPFAB_IFINDEX_SLOTS": bpf.IfindexSlots,
		"XDPFAB_AV_MAGIC": bpf.AVMagic, "XDPFAB_AV_RETRY": bpf.AVRetry, "XDPFAB_AV_PAGE_LINES": bpf.AVPageLines,
		"XDPFAB_EPS_FREE": bpf.EPSFree, "XDPFAB_EPS_USED": bpf.EPSUsed, "XDPFAB_EPS_RETIRED": bpf.EPSRetired,
		"XDPFAB_EP_PER_PORT": bpf.EPPerPort,
	} {
		cVal, ok := c[name]
		switch {
		case !ok:
			t.Errorf("%s not found in xdpfab_consts.h", name)
		case cVal != goVal:
			t.Errorf("%s = %d in C, %d in Go", name, cVal, goVal)
		}
	}
}

// wire reads and writes the metadata and the header at the offsets and
// sizes xdpfab_structs.h pins with _Static_assert (so the compiler checks
// the C side and this test the Go side): every pinned member is checked
// against the wire field of the same name, by value.
func TestWireLayoutMatchesC(t *testing.T) {
	src, err := os.ReadFile("xdpfab_structs.h")
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^_Static_assert\(sizeof\(struct (\w+)\) == (\d+)`).FindAllStringSubmatch(string(src), -1) {
		sizes[m[1]], _ = strconv.Atoi(m[2])
	}
	offsets := map[string]map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^XDPFAB_AT\((\w+), (\w+), (\d+)\);`).FindAllStringSubmatch(string(src), -1) {
		if offsets[m[1]] == nil {
			offsets[m[1]] = map[string]int{}
		}
		offsets[m[1]][m[2]], _ = strconv.Atoi(m[3])
	}
	type field struct {
		width int
		value uint64
	}
	check := func(cName string, size int, b []byte, order binary.ByteOrder, fields map[string]field) {
		t.Helper()
		if sizes[cName] != size {
			t.Errorf("sizeof(struct %s) = %d in C, %d in wire", cName, sizes[cName], size)
		}
		for name, f := range fields {
			off, ok := offsets[cName][name]
			if !ok {
				t.Errorf("%s.%s: no offset pinned in xdpfab_structs.h", cName, name)
				continue
			}
			var got uint64
			switch p := b[off:]; f.width {
			case 1:
				got = uint64(p[0])
			case 2:
				got = uint64(order.Uint16(p))
			case 4:
				got = uint64(order.Uint32(p))
			default:
				got = order.Uint64(p)
			}
			if got != f.value {
				t.Errorf("%s.%s at %d: %#x, want %#x", cName, name, off, got, f.value)
			}
			delete(offsets[cName], name)
		}
		for name := range offsets[cName] {
			t.Errorf("%s.%s: pinned in C, unknown to wire", cName, name)
		}
	}

	// The header: wire.PutHdr writes it, C reads it (network byte order).
	h := wire.Hdr{Op: 0x11, Flags: 0x22, RxCtx: 0x33, Group: 0x44444444, AuthKey: 0x55555555, Tag: 0x6666666666666666, CQData: 0x7777777777777777}
	b := make([]byte, wire.HdrLen)
	wire.PutHdr(b, h)
	check("wire_hdr", wire.HdrLen, b, binary.BigEndian, map[string]field{
		"magic": {4, wire.Magic}, "version": {1, wire.Version}, "op": {1, uint64(h.Op)}, "flags": {1, uint64(h.Flags)},
		"rx_ctx": {1, uint64(h.RxCtx)}, "group": {4, uint64(h.Group)}, "auth_key": {4, uint64(h.AuthKey)},
		"tag": {8, h.Tag}, "cq_data": {8, h.CQData},
	})

	// The metadata: C writes it, wire.ParseMeta reads it (host byte order).
	// Find where ParseMeta reads each field by decoding single bytes.
	m := wire.Meta{FiAddr: 0x1111111111111111, UserID: 0x2222222222222222, EpID: 0x33333333, Flags: 0x4444, L3Off: 0x5555,
		HdrOff: 0x6666, PayloadLen: 0x7777, Family: 0x88, Version: wire.MetaVersion, RxCtx: 0x99}
	b = make([]byte, wire.MetaLen)
	for _, f := range []struct {
		name  string
		width int
		value uint64
	}{
		{"fi_addr", 8, m.FiAddr}, {"user_id", 8, m.UserID}, {"ep_id", 4, uint64(m.EpID)}, {"flags", 2, uint64(m.Flags)},
		{"l3_off", 2, uint64(m.L3Off)}, {"hdr_off", 2, uint64(m.HdrOff)}, {"payload_len", 2, uint64(m.PayloadLen)},
		{"family", 1, uint64(m.Family)}, {"version", 1, uint64(m.Version)}, {"rx_ctx", 1, uint64(m.RxCtx)},
	} {
		off, ok := offsets["rx_meta"][f.name]
		if !ok {
			t.Errorf("rx_meta.%s: no offset pinned in xdpfab_structs.h", f.name)
			continue
		}
		delete(offsets["rx_meta"], f.name)
		switch f.width {
		case 1:
			b[off] = byte(f.value)
		case 2:
			binary.NativeEndian.PutUint16(b[off:], uint16(f.value))
		case 4:
			binary.NativeEndian.PutUint32(b[off:], uint32(f.value))
		default:
			binary.NativeEndian.PutUint64(b[off:], f.value)
		}
	}
	for name := range offsets["rx_meta"] {
		t.Errorf("rx_meta.%s: pinned in C, unknown to wire", name)
	}
	if sizes["rx_meta"] != wire.MetaLen {
		t.Errorf("sizeof(struct rx_meta) = %d in C, %d in wire", sizes["rx_meta"], wire.MetaLen)
	}
	if got, ok := wire.ParseMeta(b); !ok || got != m {
		t.Errorf("wire.ParseMeta of the C layout: %+v (ok %v)\nwant %+v", got, ok, m)
	}
}

// Every counter has a name of its own (stringer's, from types.go): a
// counter added in C without one in Go shows here as "Counter(n)".
func TestCounterNames(t *testing.T) {
	seen := map[string]bool{}
	for c := range bpf.NumCounters {
		name := c.String()
		if name == "" || strings.HasPrefix(name, "Counter(") || seen[name] {
			t.Errorf("counter %d: name %q", uint32(c), name)
		}
		seen[name] = true
	}
	if got := bpf.CounterUnknown.String(); got != "unknown_source" {
		t.Errorf("CounterUnknown is %q", got)
	}
}
