//go:build !linux

package dataplane

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/xdpfab/xdpfab/fi"
)

// AF_XDP, memfds and network namespaces are Linux's (sys_linux.go): here
// every call that needs one fails with errNotLinux, so Open, AdoptSocket,
// NewUMEM with Shared and ThreadNetns do. A UMEM in anonymous memory can be
// made (and its frames allocated), but no socket can use it.
var errNotLinux = fmt.Errorf("AF_XDP needs Linux: %w", fi.EOPNOTSUPP)

// Never used: no AF_XDP socket exists here.
const (
	soBusyPoll       = -1
	soPreferBusyPoll = -1
	soBusyPollBudget = -1
	mapPopulate      = 0
)

func populateHuge(b []byte)                          {}
func xskSocket() (int, error)                        { return -1, errNotLinux }
func xskBind(fd int, sa *sockaddrXDP) error          { return errNotLinux }
func xskCheck(fd int) error                          { return errNotLinux }
func sealedMemfd(name string, size int) (int, error) { return -1, errNotLinux }
func socketNetns(fd int) (uint64, error)             { return 0, errNotLinux }

// ThreadNetns fails with fi.EOPNOTSUPP: network namespaces are Linux's.
func ThreadNetns() (uint64, error) { return 0, errNotLinux }

// No shared futex here: sleep a little (no ShareBlock exists off Linux,
// sealedMemfd failing).
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	time.Sleep(min(d, 50*time.Microsecond))
}
func futexWake(w *atomic.Uint32, n int) {}
