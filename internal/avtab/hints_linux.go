package avtab

import "golang.org/x/sys/unix"

// adviseHuge asks for transparent huge pages (THP in "madvise" or
// "always" mode; with "never" the pages stay 4 KiB: slower, not wrong),
// then faults the memory in (MADV_POPULATE_WRITE, Linux 5.14), so that
// the AV's open pays for the pages rather than its first inserts: in a
// VM, first-touching fresh memory costs milliseconds per few MiB
// (measured: 4 MiB of hints took 1-5 ms).
func adviseHuge(b []byte) {
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	_ = unix.Madvise(b, unix.MADV_POPULATE_WRITE)
}
