package ep

// Parked reports how many received frames wait for a matching receive, over
// all receive contexts (for tests that must know a frame was parked).
func (e *Endpoint) Parked() int {
	n := 0
	for _, c := range e.rx {
		c.mu.Lock()
		n += len(c.parked)
		c.mu.Unlock()
	}
	return n
}

// HeldForRefill reports the most received frames one receive context keeps
// back from one queue's fill ring (rxCtx.lazy bounds it).
func (e *Endpoint) HeldForRefill() int {
	n := 0
	for _, c := range e.rx {
		c.mu.Lock()
		for _, r := range c.refill {
			n = max(n, len(r))
		}
		c.mu.Unlock()
	}
	return n
}
