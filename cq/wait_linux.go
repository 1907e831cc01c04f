//go:build linux

package cq

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// newWakeFD opens the descriptor of WaitFD and WaitPollFD: an eventfd.
func newWakeFD() (wakeFD, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return wakeFD{}, fmt.Errorf("eventfd: %w", err)
	}
	return wakeFD{r: efd, w: efd}, nil
}
