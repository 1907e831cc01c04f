package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// OpenPinned opens the maps a node's agent pinned under pinRoot, read-only
// and without loading or attaching anything: what an unprivileged
// application needs to read named AVs and counters. It needs read access
// to the pins (see ShareWithGroup), no capability. The XSKMAP is not
// opened, and the returned Objects has no Program. Its Lock takes the
// writers' lock only where this process may open it (root, the pins'
// owner); an application of the group reads without it, as FromFDs does.
func OpenPinned(pinRoot string) (*Objects, error) {
	if err := checkOS(); err != nil {
		return nil, err
	}
	d := &Objects{pinned: true, cfg: Config{PinRoot: pinRoot}}
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
	for i, dst := range d.readOnlySet() {
		if *dst, err = open(ReadOnlyMaps[i]); err != nil {
			d.Close()
			return nil, fmt.Errorf("loader: %w", err)
		}
	}
	d.readLimits()
	d.lockFile = openReaderLock(pinRoot)
	return d, nil
}

// ShareWithGroup lets members of group gid read the pinned maps, so that
// unprivileged applications of that group can use OpenPinned. Links, the
// XSKMAP and the writers' lock (LockPath) stay the owner's: members may
// open the pin root and maps/, which no one locks, but never the lock the
// writers wait for (lock.go).
func (d *Objects) ShareWithGroup(gid int) error {
	if err := d.loaded("loader: share pins"); err != nil {
		return err
	}
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
	for _, name := range ReadOnlyMaps {
		share(filepath.Join(root, "maps", name), 0o640)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("loader: share pins with group %d: %w", gid, err)
	}
	return nil
}

// ReadOnlyMaps is the order of the map descriptors FromFDs takes and the
// agent hands out (client.OpenAV).
var ReadOnlyMaps = []string{bpf.MapAVTab, bpf.MapAVMeta, bpf.MapAuthKey, bpf.MapEP, bpf.MapStats}

// readOnlySet is where the ReadOnlyMaps go, in that order.
func (d *Objects) readOnlySet() []**ebpf.Map {
	return []**ebpf.Map{&d.AVTab, &d.AVMeta, &d.AuthKey, &d.EP, &d.Stats}
}

// ReadOnlyFDs opens read-only handles on the dataplane's maps, in
// ReadOnlyMaps order, then on every AV table, for handing to applications
// (close them after).
func (d *Objects) ReadOnlyFDs() ([]*ebpf.Map, error) {
	return d.readOnlyFDs("")
}

// ReadOnlyFDsFor is ReadOnlyFDs with the table of the named AV only: what
// an application that opens that AV needs, and a bounded number of
// descriptors however many AVs the node has (one message carries at most
// ctl.MaxFDs). No AV of that name is ENOENT.
func (d *Objects) ReadOnlyFDsFor(name string) ([]*ebpf.Map, error) {
	if name == "" {
		return nil, fmt.Errorf("loader: read-only handles for an AV: no name: %w", fi.EINVAL)
	}
	return d.readOnlyFDs(name)
}

func (d *Objects) readOnlyFDs(name string) ([]*ebpf.Map, error) {
	if err := d.loaded("loader: read-only handles"); err != nil {
		return nil, err
	}
	if !d.pinned {
		return nil, fmt.Errorf("loader: read-only handles need a pinned dataplane: %w", fi.EINVAL)
	}
	var out []*ebpf.Map
	for _, name := range ReadOnlyMaps {
		m, err := ebpf.LoadPinnedMap(filepath.Join(d.cfg.PinRoot, "maps", name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, fmt.Errorf("loader: read-only %s: %w", name, err)
		}
		out = append(out, m)
	}
	tables, err := d.pinnedTables(name)
	if err != nil {
		for _, o := range out {
			o.Close()
		}
		return nil, err
	}
	return append(out, tables...), nil
}

// FromFDs makes a read-only *Objects from map descriptors in ReadOnlyMaps
// order, then AV tables (received from the agent: ReadOnlyFDs), for an
// application that cannot reach the pins. It takes the descriptors over,
// also when it fails. Without the pin root it has no
// cross-process lock: readers see changes once their writer finished them.
func FromFDs(fds []int) (*Objects, error) {
	err := checkOS()
	if err == nil && len(fds) < len(ReadOnlyMaps) {
		err = fmt.Errorf("loader: %d map descriptors, want at least %d: %w", len(fds), len(ReadOnlyMaps), fi.EINVAL)
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	d := &Objects{pinned: true, fromFDs: true}
	dst := d.readOnlySet()
	for _, fd := range fds[len(dst):] {
		d.addTable(fd) // an AV table, or the agent's stamp page (stamps.go)
	}
	for i, fd := range fds[:len(dst)] {
		m, err := ebpf.NewMapFromFD(fd)
		if err != nil {
			d.Close()
			for _, rest := range fds[i:len(dst)] {
				unix.Close(rest)
			}
			return nil, fmt.Errorf("loader: map descriptor %d: %w", i, err)
		}
		*dst[i] = m
	}
	d.readLimits()
	return d, nil
}

// readLimits fills a read-only dataplane's Config from the maps: MaxAVs
// from the metadata array, AVEntries from its slot 0 (fixAVEntries).
func (d *Objects) readLimits() {
	d.cfg.MaxAVs = d.AVMeta.MaxEntries()
	var g bpf.AVMeta
	if d.AVMeta.Lookup(uint32(0), &g) == nil {
		d.cfg.AVEntries = uint32(min(g.Flags, 1<<32-1))
	}
}
