//go:build !race

package avtab

// storeHint writes a Reader's slot hint (Table.pos) with a plain store.
// sync/atomic's store is an XCHG on x86-64, a full barrier that waits for
// the slot write just before it (a cache miss, in a batch insert): a few
// nanoseconds of every insert. Readers load hints with atomic loads while
// this process's writer and readers store them: a race in the Go memory
// model's terms, but one on a word, where every read observes a value some
// write stored, and a hint is only a guess that the reader checks against
// the slot it names (Reader.read): a stale or concurrent hint costs a
// second read, never a wrong answer. Under the race detector the store is
// atomic (hint_race.go), so that the detector still checks all the rest.
func storeHint(p *uint32, v uint32) { *p = v }
