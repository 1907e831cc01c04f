package ep

import (
	"bytes"
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/fi"
)

// GetName writes the endpoint's own address, as the raw sockaddr_in or
// sockaddr_in6 that peers insert into their AVs (av.InsertRaw), into buf
// and returns its length (fi_getname). A buf too short for it fails with
// fi.ETOOSMALL and returns the length needed, as fi_getname's addrlen
// does. A wildcard endpoint (0.0.0.0 or ::) names its wildcard address:
// peers must use one of the host's addresses with its port.
func (e *Endpoint) GetName(buf []byte) (int, error) {
	if err := e.usable("ep getname"); err != nil {
		return 0, err
	}
	name := fi.EncodeSockaddr(nil, e.attr.Local)
	if len(buf) < len(name) {
		return len(name), fmt.Errorf("ep getname: buffer of %d bytes, the address needs %d: %w", len(buf), len(name), fi.ETOOSMALL)
	}
	return copy(buf, name), nil
}

// SetName is fi_setname. An endpoint is enabled by Open, which binds it to
// Attr.Local or Attr.Name, so there is nothing left to set: naming the
// address the endpoint has succeeds and changes nothing, any other is
// fi.EOPBADSTATE (open an endpoint with Attr.Name to bind to a given
// address), and bytes that are no sockaddr are fi.EINVAL.
func (e *Endpoint) SetName(addr []byte) error {
	if err := e.usable("ep setname"); err != nil {
		return err
	}
	ap, err := parseName(addr)
	if err != nil {
		return fmt.Errorf("ep setname: %w", err)
	}
	if ap != e.attr.Local {
		return fmt.Errorf("ep setname: the endpoint is enabled on %v; bind to %v by opening an endpoint with Attr.Name: %w",
			e.attr.Local, ap, fi.EOPBADSTATE)
	}
	return nil
}

// parseName decodes a raw sockaddr that names a local address: family
// and length checked, sin_zero zero, a port.
func parseName(raw []byte) (netip.AddrPort, error) {
	ap, err := fi.DecodeSockaddr(raw)
	if err != nil {
		return ap, err
	}
	if ap.Addr().Is4() && len(raw) >= fi.SockaddrInLen && !bytes.Equal(raw[8:16], make([]byte, 8)) {
		return ap, fmt.Errorf("sockaddr_in with a non-zero sin_zero: %w", fi.EINVAL)
	}
	if ap.Port() == 0 {
		return ap, fmt.Errorf("address %v has no port: %w", ap, fi.EINVAL)
	}
	return ap, nil
}
