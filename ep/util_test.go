package ep_test

import "os"

func readDir(p string) (int, error) {
	e, err := os.ReadDir(p)
	return len(e), err
}

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

// fdTargets maps each open descriptor of the process to what it refers to.
func fdTargets() map[string]string {
	ents, _ := os.ReadDir("/proc/self/fd")
	m := make(map[string]string, len(ents))
	for _, e := range ents {
		m[e.Name()], _ = os.Readlink("/proc/self/fd/" + e.Name())
	}
	return m
}

// newFDs lists the descriptors open now that were not in before.
func newFDs(before map[string]string) []string {
	var out []string
	for fd, target := range fdTargets() {
		if before[fd] != target {
			out = append(out, fd+" -> "+target)
		}
	}
	return out
}
