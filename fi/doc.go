// Package fi is xdpfab's shared vocabulary with libfabric: fabric addresses
// (fi_addr_t), the flag bits of fi_av(3) and fi_cq(3), and the errno values
// every xdpfab API reports.
//
// Numeric values match libfabric's headers (fabric.h, fi_errno.h, fi_domain.h)
// so that logs, metrics and tools agree with libfabric programs. Errors are
// positive errno values of type Errno, wrapped with context by callers:
//
//	return fmt.Errorf("av insert %s: %w", addr, fi.EADDRNOTAVAIL)
//
// and tested with errors.Is(err, fi.EADDRNOTAVAIL). An Errno also matches the
// syscall.Errno of the same value, so errors.Is(err, unix.EINVAL) works too.
//
// This package has no behaviour beyond formatting; it is not where address
// vectors or completion queues live (see packages av and cq).
package fi
