package ep

import "net/netip"

// SetShmQuota lowers the same-host channel quota until restore.
func SetShmQuota(n int) (restore func()) {
	old := shmQuota
	shmQuota = n
	return func() { shmQuota = old }
}

// ShmScribble runs f on the memory of e's channel to dest and on its next
// slot, as a hostile sender would write them, and reports whether e has
// that channel.
func (e *Endpoint) ShmScribble(dest netip.AddrPort, f func(mem []byte, slot1 []byte)) bool {
	tx := e.shmOut(dest)
	if tx == nil {
		return false
	}
	e.dev.tx.mu.Lock()
	defer e.dev.tx.mu.Unlock()
	f(tx.m.b, tx.m.slot(tx.tail))
	return true
}
