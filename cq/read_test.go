package cq

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// fi_cq_read and docs/semantics.md#read-and-eagain: EAGAIN when empty
// (count 0 too), FIFO order, partial batches.
func TestReadEmptyAndFIFO(t *testing.T) {
	q := mustOpen(t, Attr{Size: 8, Format: FormatMsg})
	p := mustBind(t, q, BindAttr{})
	buf := make([]Entry, 4)

	_, err := q.Read(buf)
	wantErr(t, "Read on empty CQ", err, fi.EAGAIN)
	_, err = q.Read(nil)
	wantErr(t, "Read(count 0) on empty CQ", err, fi.EAGAIN)

	for i := range 6 {
		mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{i}, Flags: fi.Send | fi.Msg}})
	}
	if n, err := q.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(count 0) on a non-empty CQ = %d, %v; want 0, nil", n, err)
	}
	var got []int
	for {
		n, err := q.Read(buf)
		if err != nil {
			wantErr(t, "Read after draining", err, fi.EAGAIN)
			break
		}
		for _, e := range buf[:n] {
			got = append(got, ctxID(e.OpContext))
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5}; !equalInts(got, want) {
		t.Fatalf("read order %v, want %v", got, want)
	}
	if st := q.Stats(); st.Written != 6 || st.Read != 6 || st.Depth != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// format: each format fills its libfabric struct's fields, in order, and
// zeroes the rest of Entry.
func TestReadFormats(t *testing.T) {
	rx := make([]byte, 64)
	full := Entry{OpContext: &ctx{7}, Flags: fi.Recv | fi.Tagged | fi.RemoteCQData | fi.MultiRecv,
		Len: 5, Buf: rx[8:13], Data: 0xdead, Tag: 0xbeef}
	tests := []struct {
		format Format
		want   Entry
	}{
		{FormatContext, Entry{OpContext: full.OpContext}},
		{FormatMsg, Entry{OpContext: full.OpContext, Flags: full.Flags, Len: 5}},
		{FormatData, Entry{OpContext: full.OpContext, Flags: full.Flags, Len: 5, Buf: full.Buf, Data: 0xdead}},
		{FormatTagged, full},
	}
	for _, tt := range tests {
		t.Run(tt.format.String(), func(t *testing.T) {
			q := mustOpen(t, Attr{Format: tt.format})
			p := mustBind(t, q, BindAttr{})
			mustPush(t, p, Completion{Entry: full})
			// Stale values in the caller's buffer must not survive.
			buf := []Entry{{Flags: fi.Write, Len: 99, Data: 1, Tag: 2, Buf: rx}}
			if n, err := q.Read(buf); n != 1 || err != nil {
				t.Fatalf("Read = %d, %v", n, err)
			}
			if !sameEntry(buf[0], tt.want) {
				t.Fatalf("got %+v\nwant %+v", buf[0], tt.want)
			}
		})
	}
}

func sameEntry(a, b Entry) bool {
	return a.OpContext == b.OpContext && a.Flags == b.Flags && a.Len == b.Len &&
		len(a.Buf) == len(b.Buf) && (len(a.Buf) == 0 || &a.Buf[0] == &b.Buf[0]) &&
		a.Data == b.Data && a.Tag == b.Tag
}

// COMPLETION FLAGS: the producer's flags reach the reader unchanged, with the
// fields they make valid.
func TestCompletionFlags(t *testing.T) {
	mrecv := make([]byte, 256)
	tests := []struct {
		name string
		e    Entry
	}{
		{"send of a message", Entry{OpContext: &ctx{1}, Flags: fi.Send | fi.Msg}},
		{"send of a tagged message", Entry{OpContext: &ctx{2}, Flags: fi.Send | fi.Tagged}},
		{"receive of a message", Entry{OpContext: &ctx{3}, Flags: fi.Recv | fi.Msg, Len: 100}},
		{"tagged receive", Entry{OpContext: &ctx{4}, Flags: fi.Recv | fi.Tagged, Len: 8, Tag: 0x1234}},
		{"receive with remote CQ data", Entry{OpContext: &ctx{5}, Flags: fi.Recv | fi.Msg | fi.RemoteCQData, Len: 4, Data: 42}},
		{"message placed in a multi-receive buffer", Entry{OpContext: &ctx{6}, Flags: fi.Recv | fi.Msg, Len: 10, Buf: mrecv[32:42]}},
		{"last message of a multi-receive buffer", Entry{OpContext: &ctx{7}, Flags: fi.Recv | fi.Msg | fi.MultiRecv, Len: 10, Buf: mrecv[42:52]}},
		{"multi-receive buffer released alone", Entry{OpContext: &ctx{8}, Flags: fi.MultiRecv}},
		{"remote write with CQ data, no context", Entry{Flags: fi.RMA | fi.RemoteWrite | fi.RemoteCQData, Data: 9}},
	}
	q := mustOpen(t, Attr{Format: FormatTagged})
	p := mustBind(t, q, BindAttr{})
	for _, tt := range tests {
		mustPush(t, p, Completion{Entry: tt.e})
	}
	buf := make([]Entry, len(tests)+1)
	n, err := q.Read(buf)
	if n != len(tests) || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	for i, tt := range tests {
		if !sameEntry(buf[i], tt.e) {
			t.Errorf("%s: got %+v, want %+v (flags %s)", tt.name, buf[i], tt.e, tt.e.Flags)
		}
	}
}

// fi_cq_readerr and docs/semantics.md#readerr: errors are queued in order with
// successes; Read returns the successes ahead of an error, then EAVAIL;
// ReadErr pops one error when the head is an error, else EAGAIN.
func TestErrorsInOrder(t *testing.T) {
	q := mustOpen(t, Attr{Format: FormatMsg})
	p := mustBind(t, q, BindAttr{})
	ok := func(id int) Completion {
		return Completion{Entry: Entry{OpContext: &ctx{id}, Flags: fi.Recv | fi.Msg, Len: id}}
	}
	bad := func(id int) Completion {
		return Completion{Entry: Entry{OpContext: &ctx{id}, Flags: fi.Recv | fi.Msg}, Err: fi.EIO, ProvErrno: -id}
	}
	for _, c := range []Completion{ok(1), ok(2), bad(3), ok(4), bad(5), bad(6), ok(7)} {
		mustPush(t, p, c)
	}
	buf := make([]Entry, 10)
	var e ErrEntry

	steps := []struct {
		op      string // "read" or "readerr"
		wantN   int
		wantIDs []int // read: contexts; readerr: one context
		wantErr fi.Errno
	}{
		{"readerr", 0, nil, fi.EAGAIN}, // head is a success
		{"read", 2, []int{1, 2}, 0},
		{"read", 0, nil, fi.EAVAIL},
		{"read", 0, nil, fi.EAVAIL}, // EAVAIL again: nothing consumed
		{"readerr", 1, []int{3}, 0},
		{"readerr", 0, nil, fi.EAGAIN},
		{"read", 1, []int{4}, 0},
		{"readerr", 1, []int{5}, 0},
		{"read", 0, nil, fi.EAVAIL},
		{"readerr", 1, []int{6}, 0},
		{"read", 1, []int{7}, 0},
		{"read", 0, nil, fi.EAGAIN},
		{"readerr", 0, nil, fi.EAGAIN},
	}
	for i, s := range steps {
		switch s.op {
		case "read":
			n, err := q.Read(buf)
			wantErr(t, s.op, err, s.wantErr)
			if n != s.wantN {
				t.Fatalf("step %d: Read = %d, want %d", i, n, s.wantN)
			}
			for j, id := range s.wantIDs {
				if got := ctxID(buf[j].OpContext); got != id || buf[j].Len != id {
					t.Fatalf("step %d: entry %d is %d (len %d), want %d", i, j, got, buf[j].Len, id)
				}
			}
		case "readerr":
			e = ErrEntry{}
			err := q.ReadErr(&e)
			wantErr(t, s.op, err, s.wantErr)
			if s.wantErr == 0 {
				id := s.wantIDs[0]
				if ctxID(e.OpContext) != id || e.Err != fi.EIO || e.ProvErrno != -id || e.Flags != fi.Recv|fi.Msg {
					t.Fatalf("step %d: ReadErr = %+v, want context %d, EIO, prov_errno %d", i, e, id, -id)
				}
			}
		}
	}
	if st := q.Stats(); st.Errors != 0 || st.Depth != 0 || st.Read != 7 {
		t.Fatalf("Stats = %+v", st)
	}
}

// err_data (docs/semantics.md#err_data): with err_data_size 0 the CQ lends its
// own buffer, valid until the next read; otherwise min(sizes) bytes are
// copied and ErrData is cut to what was copied.
func TestReadErrData(t *testing.T) {
	long := []byte("provider error data: 32 bytes..!")
	short := []byte("short")
	tests := []struct {
		name   string
		data   []byte // the completion's err_data
		in     []byte // ErrEntry.ErrData on input
		want   []byte
		cqOwns bool
	}{
		{"size 0: CQ-owned buffer", long, nil, long, true},
		{"size 0 (empty, non-nil slice): CQ-owned buffer", long, []byte{}, long, true},
		{"larger user buffer: all copied", short, make([]byte, 64), short, false},
		{"equal user buffer", long, make([]byte, len(long)), long, false},
		{"smaller user buffer: truncated", long, make([]byte, 8), long[:8], false},
		{"no error data, CQ-owned", nil, nil, nil, true},
		{"no error data, user buffer", nil, make([]byte, 8), []byte{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := mustOpen(t, Attr{})
			p := mustBind(t, q, BindAttr{})
			mustPush(t, p, Completion{Err: fi.EIO, ErrData: tt.data})
			e := ErrEntry{ErrData: tt.in}
			if err := q.ReadErr(&e); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(e.ErrData, tt.want) {
				t.Fatalf("ErrData = %q, want %q", e.ErrData, tt.want)
			}
			if !tt.cqOwns && len(tt.in) > 0 && &e.ErrData[:1][0] != &tt.in[0] {
				t.Fatalf("ErrData does not alias the caller's buffer")
			}
		})
	}

	t.Run("CQ-owned buffer reused across calls", func(t *testing.T) {
		q := mustOpen(t, Attr{})
		p := mustBind(t, q, BindAttr{})
		mustPush(t, p, Completion{Err: fi.EIO, ErrData: short})
		mustPush(t, p, Completion{Err: fi.EIO, ErrData: long})
		var e ErrEntry
		if err := q.ReadErr(&e); err != nil || string(e.ErrData) != string(short) {
			t.Fatalf("first ReadErr: %q, %v", e.ErrData, err)
		}
		// e.ErrData now points at the CQ's buffer: passing it back is
		// size 0, so the longer second error data is not truncated.
		if err := q.ReadErr(&e); err != nil || string(e.ErrData) != string(long) {
			t.Fatalf("second ReadErr: %q, %v", e.ErrData, err)
		}
	})

	t.Run("producer's err_data is copied", func(t *testing.T) {
		q := mustOpen(t, Attr{})
		p := mustBind(t, q, BindAttr{})
		data := []byte("abc")
		mustPush(t, p, Completion{Err: fi.EIO, ErrData: data})
		data[0] = 'X'
		var e ErrEntry
		if err := q.ReadErr(&e); err != nil || string(e.ErrData) != "abc" {
			t.Fatalf("ReadErr: %q, %v", e.ErrData, err)
		}
	})

	t.Run("truncation error with olen", func(t *testing.T) {
		q := mustOpen(t, Attr{Format: FormatTagged})
		p := mustBind(t, q, BindAttr{})
		c := Completion{Entry: Entry{OpContext: &ctx{1}, Flags: fi.Recv | fi.Tagged, Len: 64, Tag: 5}, Err: fi.ETRUNC, OLen: 36, ProvErrno: -int(fi.ETRUNC)}
		mustPush(t, p, c)
		var e ErrEntry
		if err := q.ReadErr(&e); err != nil {
			t.Fatal(err)
		}
		if e.Err != fi.ETRUNC || e.OLen != 36 || e.Len != 64 || e.Tag != 5 || ctxID(e.OpContext) != 1 || e.SrcAddr != fi.AddrNotAvail {
			t.Fatalf("ReadErr = %+v", e)
		}
	})

	t.Run("nil entry", func(t *testing.T) {
		q := mustOpen(t, Attr{})
		wantErr(t, "ReadErr(nil)", q.ReadErr(nil), fi.EINVAL)
	})
}

// fi_cq_readfrom and docs/semantics.md#readfrom: the source is NOTAVAIL without
// FI_SOURCE; with FI_SOURCE an unknown sender is NOTAVAIL; with
// FI_SOURCE_ERR an unknown sender becomes an EADDRNOTAVAIL error whose
// err_data is the sender's raw address.
func TestReadFromSource(t *testing.T) {
	sender4 := netip.MustParseAddrPort("10.1.2.3:5000")
	sender6 := netip.MustParseAddrPort("[fd00::7]:6000")
	const known = fi.Addr(42)
	tests := []struct {
		name    string
		caps    fi.Flags
		c       Completion
		wantSrc fi.Addr
		wantErr bool
		raw     netip.AddrPort
	}{
		{"no FI_SOURCE: known sender", 0, Completion{Src: known}, fi.AddrNotAvail, false, netip.AddrPort{}},
		{"no FI_SOURCE: unknown sender", 0, Completion{SrcUnknown: true, SrcRaw: encodeSockaddr(sender4)}, fi.AddrNotAvail, false, netip.AddrPort{}},
		{"FI_SOURCE: known sender", fi.Source, Completion{Src: known}, known, false, netip.AddrPort{}},
		{"FI_SOURCE: user ID chosen by the producer", fi.Source, Completion{Src: 0xabcdef}, 0xabcdef, false, netip.AddrPort{}},
		{"FI_SOURCE: unknown sender", fi.Source, Completion{SrcUnknown: true, SrcRaw: encodeSockaddr(sender4)}, fi.AddrNotAvail, false, netip.AddrPort{}},
		{"FI_SOURCE_ERR: known sender", fi.Source | fi.SourceErr, Completion{Src: known}, known, false, netip.AddrPort{}},
		{"FI_SOURCE_ERR: unknown IPv4 sender", fi.Source | fi.SourceErr, Completion{SrcUnknown: true, SrcRaw: encodeSockaddr(sender4)}, fi.AddrNotAvail, true, sender4},
		{"FI_SOURCE_ERR: unknown IPv6 sender", fi.Source | fi.SourceErr, Completion{SrcUnknown: true, SrcRaw: encodeSockaddr(sender6)}, fi.AddrNotAvail, true, sender6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := mustOpen(t, Attr{Format: FormatData})
			p := mustBind(t, q, BindAttr{Caps: tt.caps})
			c := tt.c
			c.Entry = Entry{OpContext: &ctx{1}, Flags: fi.Recv | fi.Msg | fi.RemoteCQData, Len: 11, Data: 77}
			mustPush(t, p, c)
			buf := make([]Entry, 2)
			src := []fi.Addr{123, 456}
			n, err := q.ReadFrom(buf, src)
			if !tt.wantErr {
				if n != 1 || err != nil {
					t.Fatalf("ReadFrom = %d, %v", n, err)
				}
				if src[0] != tt.wantSrc || src[1] != 456 {
					t.Fatalf("src = %v, want [%v 456]", src, tt.wantSrc)
				}
				return
			}
			wantErr(t, "ReadFrom", err, fi.EAVAIL)
			if src[0] != 123 {
				t.Fatalf("ReadFrom wrote src %v on EAVAIL", src[0])
			}
			var e ErrEntry
			if err := q.ReadErr(&e); err != nil {
				t.Fatal(err)
			}
			// The data was received: every field of the completion is there.
			if e.Err != fi.EADDRNOTAVAIL || ctxID(e.OpContext) != 1 || e.Len != 11 || e.Data != 77 ||
				e.Flags != fi.Recv|fi.Msg|fi.RemoteCQData || e.SrcAddr != fi.AddrNotAvail {
				t.Fatalf("ReadErr = %+v", e)
			}
			ap, err := fi.DecodeSockaddr(e.ErrData)
			if err != nil || ap != tt.raw {
				t.Fatalf("err_data %x decodes to %v, %v; want %v", e.ErrData, ap, err, tt.raw)
			}
			if s := q.StrError(e.ProvErrno, e.ErrData); !strings.Contains(s, fi.FormatAddrStr(tt.raw)) {
				t.Fatalf("StrError = %q, want the source address", s)
			}
		})
	}

	t.Run("src shorter than buf", func(t *testing.T) {
		q := mustOpen(t, Attr{})
		p := mustBind(t, q, BindAttr{Caps: fi.Source})
		mustPush(t, p, Completion{Src: 1})
		_, err := q.ReadFrom(make([]Entry, 2), make([]fi.Addr, 1))
		wantErr(t, "ReadFrom", err, fi.EINVAL)
		if q.Stats().Depth != 1 {
			t.Fatal("EINVAL consumed an entry")
		}
		_, err = q.SReadFrom(make([]Entry, 2), make([]fi.Addr, 1), 0)
		wantErr(t, "SReadFrom", err, fi.EINVAL)
	})

	t.Run("error completion keeps its source", func(t *testing.T) {
		q := mustOpen(t, Attr{})
		p := mustBind(t, q, BindAttr{Caps: fi.Source})
		mustPush(t, p, Completion{Src: known, Err: fi.ETRUNC, OLen: 1})
		var e ErrEntry
		if err := q.ReadErr(&e); err != nil || e.SrcAddr != known {
			t.Fatalf("ReadErr = %+v, %v", e, err)
		}
	})
}

// docs/semantics.md#cancelled-receive: a cancelled receive is an ECANCELED
// error with flags RECV|MSG, len 0 and the original context.
func TestCanceledReceive(t *testing.T) {
	q := mustOpen(t, Attr{Format: FormatMsg})
	p := mustBind(t, q, BindAttr{})
	orig := &ctx{99}
	mustPush(t, p, Completion{Entry: Entry{OpContext: orig, Flags: fi.Recv | fi.Msg}, Err: fi.ECANCELED, ProvErrno: -int(fi.ECANCELED)})
	_, err := q.Read(make([]Entry, 1))
	wantErr(t, "Read", err, fi.EAVAIL)
	var e ErrEntry
	if err := q.ReadErr(&e); err != nil {
		t.Fatal(err)
	}
	if e.Err != fi.ECANCELED || e.Flags != fi.Recv|fi.Msg || e.Len != 0 || e.OpContext != any(orig) {
		t.Fatalf("ReadErr = %+v", e)
	}
}

// fi_cq_strerror.
func TestStrError(t *testing.T) {
	q := mustOpen(t, Attr{})
	tests := []struct {
		prov int
		data []byte
		want string
	}{
		{0, nil, "Success"},
		{int(fi.EIO), nil, fi.StrError(fi.EIO)},
		{-int(fi.ETRUNC), nil, "Truncation error"},
		{int(fi.EADDRNOTAVAIL), encodeSockaddr(netip.MustParseAddrPort("1.2.3.4:5000")), "source fi_sockaddr_in://1.2.3.4:5000"},
		{int(fi.EADDRNOTAVAIL), encodeSockaddr(netip.MustParseAddrPort("[::1]:5000")), "source fi_sockaddr_in6://[::1]:5000"},
		{int(fi.EIO), []byte("junk"), fi.StrError(fi.EIO)},
		{9999, nil, "Unspecified error"},
	}
	for _, tt := range tests {
		if got := q.StrError(tt.prov, tt.data); !strings.Contains(got, tt.want) {
			t.Errorf("StrError(%d, %x) = %q, want it to contain %q", tt.prov, tt.data, got, tt.want)
		}
	}
}

// The read path allocates nothing: not per entry, not per call, not on
// EAGAIN.
func TestReadDoesNotAllocate(t *testing.T) {
	for _, f := range []Format{FormatContext, FormatMsg, FormatData, FormatTagged} {
		q := mustOpen(t, Attr{Format: f, Size: 256, WaitObj: WaitFD})
		p := mustBind(t, q, BindAttr{Caps: fi.Source})
		c := Completion{Entry: Entry{OpContext: &ctx{1}, Flags: fi.Recv | fi.Msg, Len: 8}, Src: 3}
		buf := make([]Entry, 64)
		src := make([]fi.Addr, 64)
		allocs := testing.AllocsPerRun(100, func() {
			n, _ := p.Reserve(64)
			for range n {
				p.Write(&c)
			}
			p.Commit()
			q.ReadFrom(buf, src)
			q.Read(buf) // EAGAIN
			p.Push(&c)
			q.SRead(buf, 0)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per batch", f, allocs)
		}
	}
}
