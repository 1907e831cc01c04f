//go:build !linux

package loader

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// NewStampPage needs memfds and their seals: Linux only.
func NewStampPage(maxAVs int) (*StampPage, error) {
	return nil, fmt.Errorf("AV stamps: %w", fi.EOPNOTSUPP)
}

// mapStamps: no descriptor is a stamp page but on Linux.
func mapStamps(fd int) (words []uint64, ok bool, err error) { return nil, false, nil }

// isLifeLine: there are no life lines but on Linux.
func isLifeLine(fd int) bool { return false }

// watchLife: there are no life lines but on Linux.
func watchLife(fd int, words []uint64) {}
