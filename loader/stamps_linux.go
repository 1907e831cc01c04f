//go:build linux

package loader

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// NewStampPage makes the page for AV ids below maxAVs.
func NewStampPage(maxAVs int) (*StampPage, error) {
	size := (max(maxAVs, 1)*8 + os.Getpagesize() - 1) / os.Getpagesize() * os.Getpagesize()
	fd, err := unix.MemfdCreate(stampsName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("AV stamps: memfd: %w", err)
	}
	fail := func(what string, err error) (*StampPage, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("AV stamps: %s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("size", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("map", err)
	}
	// F_SEAL_FUTURE_WRITE: this mapping writes on, no later one can (nor
	// write(2)); the size is fixed; no seal comes off.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_FUTURE_WRITE|unix.F_SEAL_SEAL); err != nil {
		unix.Munmap(mem)
		return fail("seal", err)
	}
	return &StampPage{fd: fd, words: unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), size/8)}, nil
}

// stampMaps holds the stamp pages this process mapped, by memfd identity:
// each is mapped once and never unmapped, since lock-free readers keep
// pointers into it (a page per agent the process talks to).
var stampMaps = struct {
	sync.Mutex
	m map[[2]uint64][]uint64
}{m: map[[2]uint64][]uint64{}}

// mapStamps maps fd read-only if it is an agent's stamp page (a memfd
// sealed as NewStampPage seals it) and closes it; ok false leaves fd open
// (not a stamp page).
func mapStamps(fd int) (words []uint64, ok bool, err error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, false, nil // not a memfd: a map
	}
	defer unix.Close(fd)
	const want = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_FUTURE_WRITE
	if seals&want != want {
		return nil, true, fmt.Errorf("loader: AV stamp page not sealed (seals %#x): %w", seals, fi.EINVAL)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, true, fmt.Errorf("loader: AV stamp page: %w", err)
	}
	if st.Size <= 0 || st.Size%8 != 0 || st.Size > 1<<20 {
		return nil, true, fmt.Errorf("loader: AV stamp page of %d bytes: %w", st.Size, fi.EINVAL)
	}
	key := [2]uint64{st.Dev, st.Ino}
	stampMaps.Lock()
	defer stampMaps.Unlock()
	if w := stampMaps.m[key]; w != nil {
		return w, true, nil
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, true, fmt.Errorf("loader: map the AV stamp page: %w", err)
	}
	w := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
	stampMaps.m[key] = w
	return w, true, nil
}
