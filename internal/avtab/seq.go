package avtab

// The writer's side of a slot's sequence number (the seqlock protocol
// the XDP program and every Reader rely on: docs/platform.md#the-av-table-and-memory-ordering).
//
// writeBegin makes the number at p odd, a value no reader saw before, and
// returns it: from here on readers discard what they read of what it
// guards. writeEnd makes it even again: readers may use what they read. A
// number left odd by a writer that died mid-write goes to the next odd
// value, not to an even one.
//
// Between the two, the write's own stores (the slot's fields, the index's
// user ID) are plain stores: the numbers order them, and each is an
// aligned word that every architecture Go and BPF run on reads whole.
// Table fields outside a slot's window (an index's slot and reference
// count, the high mark) are plain stores too: readers without the lock
// use them only through a slot they then check (Reader), or not at all.
//
// What the two must order is per architecture: no store of the write may
// become visible before the odd number, nor after the even one
// (seq_amd64.go, seq_other.go).
