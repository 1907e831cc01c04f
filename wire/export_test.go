package wire

// Internals for the package's tests and benchmarks.
var (
	CopySum = copySum
	Sum64   = sum64
	Fold64  = fold64
)
