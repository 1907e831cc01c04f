//go:build linux

package fi

import "syscall"

// sysText is the C library's text for e, which is Linux's own number.
func sysText(e Errno) string { return syscall.Errno(e).Error() }
