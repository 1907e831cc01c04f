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

// HeldForRefill reports the most received frames the endpoint's receive
// contexts together keep back from one queue's fill ring.
func (e *Endpoint) HeldForRefill() int {
	per := map[int]int{}
	for _, c := range e.rx {
		c.mu.Lock()
		for q, r := range c.refill {
			per[q] += len(r)
		}
		c.mu.Unlock()
	}
	n := 0
	for _, v := range per {
		n = max(n, v)
	}
	return n
}
