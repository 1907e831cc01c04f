package ep

import "sync"

// optMutex is a sync.Mutex that a device whose application serializes
// every call (fi.ThreadDomain with manual progress: no goroutine of the
// endpoint's own) leaves out: off is set before the device's first
// endpoint is returned and never changes. An uncontended Lock and Unlock
// pair costs about 13 ns here (two locked instructions), and a message
// passes four to six of them (docs/platform.md#locks-an-application-can-promise-away).
type optMutex struct {
	mu  sync.Mutex
	off bool
}

func (m *optMutex) Lock() {
	if !m.off {
		m.mu.Lock()
	}
}

func (m *optMutex) Unlock() {
	if !m.off {
		m.mu.Unlock()
	}
}

func (m *optMutex) TryLock() bool { return m.off || m.mu.TryLock() }
