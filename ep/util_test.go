package ep_test

import "os"

func readDir(p string) (int, error) {
	e, err := os.ReadDir(p)
	return len(e), err
}

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }
