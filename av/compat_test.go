//go:build linux

package av_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
)

// A sockaddr_in whose sin_zero is not zero is refused per element with
// FI_ADDR_NOTAVAIL, as every libfabric provider does (ofi_valid_dest_ipaddr);
// the other elements are inserted.
func TestInsertRawSinZero(t *testing.T) {
	dp := newDP(t, 64)
	a := openAV(t, dp, av.Attr{})
	good := fi.EncodeSockaddr(nil, netip.MustParseAddrPort("198.18.3.1:7000"))
	bad := fi.EncodeSockaddr(nil, netip.MustParseAddrPort("198.18.3.2:7000"))
	bad[12] = 1 // inside sin_zero
	out := []fi.Addr{7, 7}
	errs := make([]fi.Errno, 2)
	n, err := a.InsertRaw([][]byte{good, bad}, out, fi.SyncErr, errs)
	if n != 1 || !errors.Is(err, fi.EADDRNOTAVAIL) {
		t.Fatalf("InsertRaw = %d, %v", n, err)
	}
	if out[0] == fi.AddrNotAvail || out[1] != fi.AddrNotAvail || errs[0] != 0 || errs[1] != fi.EADDRNOTAVAIL {
		t.Errorf("fi_addr %v, errors %v", out, errs)
	}
}
