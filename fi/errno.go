package fi

import (
	"strconv"
	"syscall"
)

// Errno is a positive libfabric error number. The libfabric C API returns
// these negated; xdpfab returns them as Go errors, usually wrapped with
// context. Values below 256 are Linux errno values.
type Errno int

// Linux errno values used by libfabric.
const (
	ENOENT        Errno = 2
	EIO           Errno = 5
	E2BIG         Errno = 7
	EBADF         Errno = 9
	EAGAIN        Errno = 11
	ENOMEM        Errno = 12
	EACCES        Errno = 13
	EFAULT        Errno = 14
	EBUSY         Errno = 16
	EEXIST        Errno = 17
	ENODEV        Errno = 19
	EINVAL        Errno = 22
	EMFILE        Errno = 24
	ENOSPC        Errno = 28
	ERANGE        Errno = 34
	ENOSYS        Errno = 38
	ENOMSG        Errno = 42
	ENODATA       Errno = 61
	EOVERFLOW     Errno = 75
	EMSGSIZE      Errno = 90
	ENOPROTOOPT   Errno = 92
	EOPNOTSUPP    Errno = 95
	EADDRINUSE    Errno = 98
	EADDRNOTAVAIL Errno = 99
	ENETDOWN      Errno = 100
	ENETUNREACH   Errno = 101
	ECONNABORTED  Errno = 103
	ECONNRESET    Errno = 104
	ENOBUFS       Errno = 105
	EISCONN       Errno = 106
	ENOTCONN      Errno = 107
	ESHUTDOWN     Errno = 108
	ETIMEDOUT     Errno = 110
	ECONNREFUSED  Errno = 111
	EHOSTDOWN     Errno = 112
	EHOSTUNREACH  Errno = 113
	EALREADY      Errno = 114
	EINPROGRESS   Errno = 115
	ECANCELED     Errno = 125
	EKEYREJECTED  Errno = 129
	EPERM         Errno = 1
	// EDQUOT is not in libfabric's list; the agent answers it when a
	// caller's quota is exhausted (a Linux errno, so fi_strerror has its
	// text).
	EDQUOT Errno = 122
)

// libfabric's own error numbers (fi_errno.h), starting at 256.
const (
	EOTHER      Errno = 256
	ETOOSMALL   Errno = 257
	EOPBADSTATE Errno = 258
	EAVAIL      Errno = 259
	EBADFLAGS   Errno = 260
	ENOEQ       Errno = 261
	EDOMAIN     Errno = 262
	ENOCQ       Errno = 263
	ECRC        Errno = 264
	ETRUNC      Errno = 265
	ENOKEY      Errno = 266
	ENOAV       Errno = 267
	EOVERRUN    Errno = 268
	ENORX       Errno = 269
)

var fiStrings = [...]string{
	0:                    "Unspecified error",
	ETOOSMALL - EOTHER:   "Provided buffer is too small",
	EOPBADSTATE - EOTHER: "Operation not permitted in current state",
	EAVAIL - EOTHER:      "Error available",
	EBADFLAGS - EOTHER:   "Flags not supported",
	ENOEQ - EOTHER:       "Missing or unavailable event queue",
	EDOMAIN - EOTHER:     "Invalid resource domain",
	ENOCQ - EOTHER:       "Missing or unavailable completion queue",
	ECRC - EOTHER:        "CRC error",
	ETRUNC - EOTHER:      "Truncation error",
	ENOKEY - EOTHER:      "Required key not available",
	ENOAV - EOTHER:       "Missing or unavailable address vector",
	EOVERRUN - EOTHER:    "Queue has been overrun",
	ENORX - EOTHER:       "Receiver not ready, no receive buffers available",
}

var names = map[Errno]string{
	EPERM: "EPERM", ENOENT: "ENOENT", EIO: "EIO", E2BIG: "E2BIG", EBADF: "EBADF",
	EAGAIN: "EAGAIN", ENOMEM: "ENOMEM", EACCES: "EACCES", EFAULT: "EFAULT", EBUSY: "EBUSY",
	EEXIST: "EEXIST", ENODEV: "ENODEV", EINVAL: "EINVAL", EMFILE: "EMFILE", ENOSPC: "ENOSPC",
	ERANGE: "ERANGE", ENOSYS: "ENOSYS", ENOMSG: "ENOMSG", ENODATA: "ENODATA", EOVERFLOW: "EOVERFLOW",
	EMSGSIZE: "EMSGSIZE", ENOPROTOOPT: "ENOPROTOOPT", EOPNOTSUPP: "EOPNOTSUPP",
	EADDRINUSE: "EADDRINUSE", EADDRNOTAVAIL: "EADDRNOTAVAIL", ENETDOWN: "ENETDOWN",
	ENETUNREACH: "ENETUNREACH", ECONNABORTED: "ECONNABORTED", ECONNRESET: "ECONNRESET",
	ENOBUFS: "ENOBUFS", EISCONN: "EISCONN", ENOTCONN: "ENOTCONN", ESHUTDOWN: "ESHUTDOWN",
	ETIMEDOUT: "ETIMEDOUT", ECONNREFUSED: "ECONNREFUSED", EHOSTDOWN: "EHOSTDOWN",
	EHOSTUNREACH: "EHOSTUNREACH", EALREADY: "EALREADY", EINPROGRESS: "EINPROGRESS",
	ECANCELED: "ECANCELED", EKEYREJECTED: "EKEYREJECTED", EDQUOT: "EDQUOT",
	EOTHER: "EOTHER", ETOOSMALL: "ETOOSMALL", EOPBADSTATE: "EOPBADSTATE", EAVAIL: "EAVAIL",
	EBADFLAGS: "EBADFLAGS", ENOEQ: "ENOEQ", EDOMAIN: "EDOMAIN", ENOCQ: "ENOCQ", ECRC: "ECRC",
	ETRUNC: "ETRUNC", ENOKEY: "ENOKEY", ENOAV: "ENOAV", EOVERRUN: "EOVERRUN", ENORX: "ENORX",
}

// StrError returns libfabric's description of errno e (fi_strerror). Codes
// below 256 use the C library's text (Linux's, on every system); unknown
// libfabric codes return "Unspecified error".
func StrError(e Errno) string {
	if e < 0 {
		e = -e
	}
	if e >= EOTHER {
		if int(e-EOTHER) < len(fiStrings) {
			return fiStrings[e-EOTHER]
		}
		return fiStrings[0]
	}
	s := sysText(e)
	if len(s) > 0 && s[0] >= 'a' && s[0] <= 'z' {
		s = string(s[0]-'a'+'A') + s[1:]
	}
	return s
}

// Name returns the symbolic name ("EINVAL"), or "E<n>" for an unnamed code.
func (e Errno) Name() string {
	if n, ok := names[e]; ok {
		return n
	}
	return "E" + strconv.Itoa(int(e))
}

// Error formats e as "Invalid argument (EINVAL)".
func (e Errno) Error() string {
	return StrError(e) + " (" + e.Name() + ")"
}

// Is lets errors.Is match an Errno against a syscall.Errno of the same value.
func (e Errno) Is(target error) bool {
	if se, ok := target.(syscall.Errno); ok {
		return int(se) == int(e)
	}
	return false
}

// Code extracts the errno from err: err itself or any Errno or syscall.Errno
// it wraps. It returns EOTHER for a non-nil error without one, and 0 for nil.
func Code(err error) Errno {
	if err == nil {
		return 0
	}
	for e := err; e != nil; {
		switch v := e.(type) {
		case Errno:
			return v
		case syscall.Errno:
			return Errno(v)
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if c := Code(inner); c != EOTHER {
					return c
				}
			}
			return EOTHER
		default:
			return EOTHER
		}
	}
	return EOTHER
}
