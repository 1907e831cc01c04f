package fi_test

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// libfabric's numeric values: docs/semantics.md#constants.
func TestConstants(t *testing.T) {
	if fi.AddrNotAvail != fi.Addr(^uint64(0)) || fi.AddrUnspec != fi.AddrNotAvail || fi.KeyNotAvail != ^uint64(0) {
		t.Error("reserved addresses must be all ones")
	}
	if got := fi.RxAddr(5, 3, 8); got != 0x0300000000000005 {
		t.Errorf("RxAddr(5, 3, 8) = %#x", uint64(got))
	}
	if got := fi.RxAddr(5, 3, 0); got != 5 {
		t.Errorf("RxAddr with 0 bits = %#x", uint64(got))
	}
	if got := fi.GroupAddr(7, 9); got != 9<<32|7 {
		t.Errorf("GroupAddr(7, 9) = %#x", uint64(got))
	}
	for _, tc := range []struct {
		f    fi.Flags
		want uint64
	}{
		{fi.Read, 1 << 8}, {fi.More, 1 << 18}, {fi.Event, 1 << 24}, {fi.AVUserID, 1 << 41}, {fi.Peer, 1 << 43}, {fi.Universe, 1 << 57},
		{fi.SourceErr, 1 << 50}, {fi.Source, 1 << 57}, {fi.AuthKey, 1 << 57}, {fi.SyncErr, 1 << 58},
		{fi.Symmetric, 1 << 59}, {fi.Msg, 1 << 1}, {fi.Tagged, 1 << 3}, {fi.Recv, 1 << 10}, {fi.Send, 1 << 11},
		{fi.MultiRecv, 1 << 16}, {fi.RemoteCQData, 1 << 17},
	} {
		if uint64(tc.f) != tc.want {
			t.Errorf("%v = %#x, want %#x", tc.f, uint64(tc.f), tc.want)
		}
	}
	for _, tc := range []struct {
		e    fi.Errno
		want int
	}{
		{fi.EAGAIN, 11}, {fi.EINVAL, 22}, {fi.EBUSY, 16}, {fi.ENOMEM, 12}, {fi.ENOENT, 2}, {fi.ENOSYS, 38},
		{fi.ENODATA, 61}, {fi.ENOSPC, 28}, {fi.EACCES, 13}, {fi.EADDRNOTAVAIL, 99}, {fi.ETIMEDOUT, 110},
		{fi.ECANCELED, 125}, {fi.EOTHER, 256}, {fi.ETOOSMALL, 257}, {fi.EOPBADSTATE, 258}, {fi.EAVAIL, 259},
		{fi.EBADFLAGS, 260}, {fi.ENOEQ, 261}, {fi.EDOMAIN, 262}, {fi.ENOCQ, 263}, {fi.ECRC, 264},
		{fi.ETRUNC, 265}, {fi.ENOKEY, 266}, {fi.ENOAV, 267}, {fi.EOVERRUN, 268}, {fi.ENORX, 269},
	} {
		if int(tc.e) != tc.want {
			t.Errorf("%s = %d, want %d", tc.e.Name(), int(tc.e), tc.want)
		}
	}
}

func TestErrno(t *testing.T) {
	err := fmt.Errorf("av insert 1.2.3.4:0: %w", fi.EADDRNOTAVAIL)
	if !errors.Is(err, fi.EADDRNOTAVAIL) || !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Error("errors.Is through wrapping, and against syscall.Errno")
	}
	if fi.Code(err) != fi.EADDRNOTAVAIL || fi.Code(nil) != 0 || fi.Code(errors.New("x")) != fi.EOTHER {
		t.Error("Code")
	}
	if fi.Code(fmt.Errorf("x: %w", syscall.EBUSY)) != fi.EBUSY {
		t.Error("Code of a syscall.Errno")
	}
	if fi.Code(errors.Join(errors.New("a"), fi.ENOSPC)) != fi.ENOSPC {
		t.Error("Code through errors.Join")
	}
	for e, want := range map[fi.Errno]string{
		fi.EAVAIL:   "Error available",
		fi.EOVERRUN: "Queue has been overrun",
		fi.ENORX:    "Receiver not ready, no receive buffers available",
		300:         "Unspecified error",
		fi.EAGAIN:   "Resource temporarily unavailable",
		-fi.EINVAL:  "Invalid argument",
	} {
		if got := fi.StrError(e); got != want {
			t.Errorf("StrError(%d) = %q, want %q", int(e), got, want)
		}
	}
	if fi.EINVAL.Error() != "Invalid argument (EINVAL)" {
		t.Errorf("Error() = %q", fi.EINVAL.Error())
	}
}

func TestSockaddr(t *testing.T) {
	for _, s := range []string{"1.2.3.4:5000", "[2001:2::1]:7", "[::1]:65535"} {
		ap := netip.MustParseAddrPort(s)
		raw := fi.EncodeSockaddr(nil, ap)
		back, err := fi.DecodeSockaddr(raw)
		if err != nil || back != ap {
			t.Errorf("%s: round trip %v %v", s, back, err)
		}
		str := fi.FormatAddrStr(ap)
		if back, err := fi.ParseAddrStr(str); err != nil || back != ap {
			t.Errorf("%s: string %q round trip %v %v", s, str, back, err)
		}
	}
	if fi.FormatAddrStr(netip.MustParseAddrPort("[::ffff:1.2.3.4]:9")) != "fi_sockaddr_in://1.2.3.4:9" {
		t.Error("v4-mapped formats as IPv4")
	}
	for _, bad := range []string{"1.2.3.4:5", "fi_sockaddr_in://[::1]:5", "fi_sockaddr_in6://1.2.3.4:5", "tcp://1.2.3.4:5", "fi_sockaddr_in://1.2.3.4"} {
		if _, err := fi.ParseAddrStr(bad); !errors.Is(err, fi.EINVAL) {
			t.Errorf("ParseAddrStr(%q): %v", bad, err)
		}
	}
	for _, bad := range [][]byte{nil, {2, 0}, {10, 0, 1}, {99, 0, 0, 0}} {
		if _, err := fi.DecodeSockaddr(bad); !errors.Is(err, fi.EINVAL) {
			t.Errorf("DecodeSockaddr(%v): %v", bad, err)
		}
	}
}

func TestFlagsString(t *testing.T) {
	if s := (fi.Send | fi.Msg).String(); s != "FI_MSG|FI_SEND" {
		t.Errorf("%q", s)
	}
	if s := fi.Flags(1 << 62).String(); s != "0x4000000000000000" {
		t.Errorf("%q", s)
	}
}

func TestThreading(t *testing.T) {
	for _, tc := range []struct {
		th   fi.Threading
		want int
		name string
	}{
		{fi.ThreadUnspec, 0, "FI_THREAD_UNSPEC"}, {fi.ThreadSafe, 1, "FI_THREAD_SAFE"}, {fi.ThreadFID, 2, "FI_THREAD_FID"},
		{fi.ThreadDomain, 3, "FI_THREAD_DOMAIN"}, {fi.ThreadCompletion, 4, "FI_THREAD_COMPLETION"},
		{fi.ThreadEndpoint, 5, "FI_THREAD_ENDPOINT"}, {fi.Threading(9), 9, "Threading(9)"},
	} {
		if int(tc.th) != tc.want || tc.th.String() != tc.name {
			t.Errorf("%v = %d, want %s = %d", tc.th, int(tc.th), tc.name, tc.want)
		}
	}
}
