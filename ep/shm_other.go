//go:build !linux

package ep

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// Same-host channels need memfd and pipes reopened through /proc: off Linux, where no endpoint
// opens, they fail with fi.EOPNOTSUPP.

var errShmOS = fmt.Errorf("same-host channels need Linux: %w", fi.EOPNOTSUPP)

func newSealedMemfd(string, int) (int, error) { return -1, errShmOS }
func mapSealed(int, int) ([]byte, error)      { return nil, errShmOS }
func mapFD(int, int) ([]byte, error)          { return nil, errShmOS }
func unmapShm([]byte)                         {}
func newWaker() (int, int, error)             { return -1, -1, errShmOS }
func reopenWriter(int) (int, error)           { return -1, errShmOS }
func checkPipe(int, bool) error               { return errShmOS }
func dupFD(int) (int, error)                  { return -1, errShmOS }
func signalFD(int)                            {}
func drainFD(int)                             {}
func closeFD(int)                             {}
