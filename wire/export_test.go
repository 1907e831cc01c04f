package wire

// Internals for the package's tests and benchmarks.
var (
	Sum64  = sum64
	Fold64 = fold64
)
