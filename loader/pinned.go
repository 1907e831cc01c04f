package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// OpenPinned opens the maps a node's agent pinned under pinRoot, read-only
// and without loading or attaching anything: what an unprivileged
// application needs to read named AVs and counters. It needs read access
// to the pins (see ShareWithGroup), no capability. The XSKMAP is not
// opened, and the returned Dataplane has no Program.
func OpenPinned(pinRoot string) (*Dataplane, error) {
	d := &Dataplane{pinned: true, cfg: Config{PinRoot: pinRoot}}
	dir := filepath.Join(pinRoot, "maps")
	open := func(name string) (*ebpf.Map, error) {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("open %s: no pinned xdpfab maps (is the agent running with --pin-root %s?): %w", name, pinRoot, fi.ENOENT)
		case errors.Is(err, os.ErrPermission):
			return nil, fmt.Errorf("open %s: permission denied (the agent shares its pins with the control socket's group): %w", name, fi.EACCES)
		case err != nil:
			return nil, fmt.Errorf("open %s: %w", name, err)
		}
		return m, nil
	}
	var err error
	for _, m := range []struct {
		name string
		dst  **ebpf.Map
	}{{bpf.MapAV, &d.AV}, {bpf.MapAVRev, &d.AVRev}, {bpf.MapAVMeta, &d.AVMeta}, {bpf.MapAuthKey, &d.AuthKey}, {bpf.MapEP, &d.EP}, {bpf.MapStats, &d.Stats}} {
		if *m.dst, err = open(m.name); err != nil {
			d.Close()
			return nil, fmt.Errorf("loader: %w", err)
		}
	}
	d.cfg.AVEntries, d.cfg.MaxAVs = d.AV.MaxEntries(), d.AVMeta.MaxEntries()
	if d.lockDir, err = os.Open(pinRoot); err != nil {
		d.Close()
		return nil, fmt.Errorf("loader: open pin root %s: %w", pinRoot, err)
	}
	return d, nil
}

// ShareWithGroup lets members of group gid read the pinned maps (and take
// the pin root's lock), so that unprivileged applications of that group
// can use OpenPinned. Links and the XSKMAP stay root's.
func (d *Dataplane) ShareWithGroup(gid int) error {
	if !d.pinned {
		return nil
	}
	root := d.cfg.PinRoot
	var errs []error
	share := func(p string, mode os.FileMode) {
		errs = append(errs, os.Chown(p, -1, gid), os.Chmod(p, mode))
	}
	share(root, 0o750)
	share(filepath.Join(root, "maps"), 0o750)
	for _, name := range []string{bpf.MapAV, bpf.MapAVRev, bpf.MapAVMeta, bpf.MapAuthKey, bpf.MapEP, bpf.MapStats} {
		share(filepath.Join(root, "maps", name), 0o640)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("loader: share pins with group %d: %w", gid, err)
	}
	return nil
}
