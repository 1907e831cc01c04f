package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// AV tables: each AV's table is an array map of its own (struct av_hdr in
// bpf/xdpfab_structs.h), held by xdpfab_avtab at the AV's id, which the
// process memory-maps. The loader creates, installs, pins and opens the
// maps; their layout and protocol are internal/avtab's, and what an entry
// means is package av's.

// NewAVTableMap creates an AV table map (xdpfab_avtab's inner map) of at
// least lines 64-byte lines (in elements of bpf.AVPageLines), not
// installed (SetAVTable). ENOMEM when the kernel refuses the memory.
func (d *Objects) NewAVTableMap(lines uint32) (*ebpf.Map, error) {
	if err := d.loaded("new AV table"); err != nil {
		return nil, err
	}
	if d.avTabInner == nil {
		return nil, fmt.Errorf("new AV table: a read-only dataplane creates no tables: %w", fi.EACCES)
	}
	if lines < 2 {
		return nil, fmt.Errorf("new AV table of %d lines: %w", lines, fi.EINVAL)
	}
	spec := d.avTabInner.Copy()
	spec.Name = "xdpfab_avt"
	spec.MaxEntries = (lines + bpf.AVPageLines - 1) / bpf.AVPageLines
	m, err := ebpf.NewMap(spec)
	switch {
	case errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.E2BIG):
		return nil, fmt.Errorf("new AV table of %d lines: %v: %w", lines, err, fi.ENOMEM)
	case err != nil:
		return nil, fmt.Errorf("new AV table of %d lines: %w", lines, err)
	}
	return m, nil
}

// SetAVTable installs m as AV id's table: XDP runs that start after the
// update read m. With a pin root, m is pinned as maps/xdpfab_avt_<id> in
// place of the table before (other processes open it there), with the
// group and mode of the xdpfab_avtab pin (see ShareWithGroup). The caller
// holds Lock.
func (d *Objects) SetAVTable(id uint32, m *ebpf.Map) error {
	if err := d.loaded("install AV table"); err != nil {
		return err
	}
	if m == nil {
		return fmt.Errorf("install AV table %d: nil map: %w", id, fi.EINVAL)
	}
	if d.cfg.PinRoot != "" {
		path := d.avTablePin(id)
		tmp := path + "_new" // bpffs names have no dots
		_ = os.Remove(tmp)
		if err := m.Pin(tmp); err != nil {
			return fmt.Errorf("pin AV table: %w", err)
		}
		// The table's pin is shared as the other pins are (ShareWithGroup).
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(d.cfg.PinRoot, "maps", bpf.MapAVTab), &st); err == nil {
			_ = os.Chown(tmp, -1, int(st.Gid))
			_ = os.Chmod(tmp, os.FileMode(st.Mode&0o777))
		}
		if err := os.Rename(tmp, path); err != nil {
			_ = m.Unpin()
			return fmt.Errorf("pin AV table: %w", err)
		}
	}
	if err := d.AVTab.Put(id, m); err != nil {
		return fmt.Errorf("install AV table %d: %w", id, err)
	}
	return nil
}

// DeleteAVTable removes AV id's table from xdpfab_avtab and its pin. XDP
// runs that start after it find no table for id.
func (d *Objects) DeleteAVTable(id uint32) error {
	if err := d.loaded("delete AV table"); err != nil {
		return err
	}
	if d.avTabInner == nil {
		return fmt.Errorf("delete AV table: read-only dataplane: %w", fi.EACCES)
	}
	err := d.AVTab.Delete(id)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		err = nil
	}
	if d.cfg.PinRoot != "" {
		if rerr := os.Remove(d.avTablePin(id)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

func (d *Objects) avTablePin(id uint32) string {
	return filepath.Join(d.cfg.PinRoot, "maps", avTablePrefix+strconv.FormatUint(uint64(id), 10))
}

// avTablePrefix names the tables' pins: maps/xdpfab_avt_<id>.
const avTablePrefix = "xdpfab_avt_"

// OpenAVTableMap opens AV id's current table map: through its pin when the
// dataplane has a pin root, else among the descriptors FromFDs was given
// (SetTableSource fetches new ones when the table was replaced), else by
// the id xdpfab_avtab holds (CAP_SYS_ADMIN). writable reports a
// descriptor opened for writing: Linux memory-maps a BPF map only through
// one, even read-only (mmap of a read-only descriptor loses VM_SHARED,
// which bpf_map_mmap demands). With readOnly the pin is opened for writing
// only when the caller may (its owner), else read-only. ENOENT: the AV has
// no table.
func (d *Objects) OpenAVTableMap(id uint32, readOnly bool) (m *ebpf.Map, writable bool, err error) {
	if err := d.loaded("open AV table"); err != nil {
		return nil, false, err
	}
	switch {
	case d.cfg.PinRoot != "":
		path := d.avTablePin(id)
		m, err = ebpf.LoadPinnedMap(path, nil)
		writable = err == nil
		if readOnly && (errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EPERM)) {
			m, err = ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
		}
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, false, fmt.Errorf("open AV table %d: %w", id, fi.ENOENT)
		case errors.Is(err, os.ErrPermission):
			return nil, false, fmt.Errorf("open AV table %d: %v: %w", id, err, fi.EACCES)
		case err == nil && !readOnly && d.avTabInner != nil:
			m, err = d.currentTable(id, m)
		}
	case d.fromFDs:
		m, err = d.handedTable(id)
	default:
		var mid ebpf.MapID
		if err = d.AVTab.Lookup(id, &mid); err == nil {
			if mid == 0 {
				return nil, false, fmt.Errorf("open AV table %d: %w", id, fi.ENOENT)
			}
			m, err = ebpf.NewMapFromID(mid)
			writable = err == nil
			if errors.Is(err, unix.EPERM) {
				err = fmt.Errorf("%v (opening a table by id needs CAP_SYS_ADMIN; use the agent's pins): %w", err, fi.EPERM)
			}
		} else if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, false, fmt.Errorf("open AV table %d: %w", id, fi.ENOENT)
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("open AV table %d: %w", id, err)
	}
	return m, writable, nil
}

// currentTable checks that the pinned table m is the one xdpfab_avtab
// holds for AV id, the one XDP reads; a writer that died between swapping a
// table in and pinning it (growth) leaves the pin behind. Then the pin is
// repaired, and the current table returned, so that no writer changes a
// table XDP does not read. The caller holds Lock.
func (d *Objects) currentTable(id uint32, m *ebpf.Map) (*ebpf.Map, error) {
	var want ebpf.MapID
	if err := d.AVTab.Lookup(id, &want); err != nil || want == 0 {
		return m, nil // no table installed: nothing better than the pin
	}
	info, err := m.Info()
	if err != nil {
		return m, nil
	}
	if got, ok := info.ID(); !ok || got == want {
		return m, nil
	}
	cur, err := ebpf.NewMapFromID(want)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("AV %d's pinned table is not the one XDP reads, and opening that one failed: %w", id, err)
	}
	m.Close()
	if err := d.SetAVTable(id, cur); err != nil {
		cur.Close()
		return nil, err
	}
	return cur, nil
}

// AVTableIDs returns the ids of the AVs that have a table.
func (d *Objects) AVTableIDs() ([]uint32, error) {
	if err := d.loaded("list AV tables"); err != nil {
		return nil, err
	}
	var out []uint32
	var k uint32
	var v ebpf.MapID
	it := d.AVTab.Iterate()
	for it.Next(&k, &v) {
		if v != 0 {
			out = append(out, k)
		}
	}
	return out, it.Err()
}

// WaitReaders returns once every XDP run that could still read a table
// just replaced in (or deleted from) xdpfab_avtab has returned (see
// waitReaders).
func WaitReaders() { waitReaders() }

// pinnedTables opens read-only handles on every pinned AV table, for
// ReadOnlyFDs.
func (d *Objects) pinnedTables(name string) ([]*ebpf.Map, error) {
	paths, err := filepath.Glob(filepath.Join(d.cfg.PinRoot, "maps", avTablePrefix+"*"))
	if err != nil {
		return nil, err
	}
	if name != "" {
		id, ok := d.namedAV(name)
		if !ok {
			return nil, fmt.Errorf("loader: read-only handles: no AV named %q: %w", name, fi.ENOENT)
		}
		paths = []string{d.avTablePin(id)}
	}
	var out []*ebpf.Map
	for _, p := range paths {
		if strings.HasSuffix(p, "_new") {
			continue
		}
		m, err := ebpf.LoadPinnedMap(p, &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue // replaced or deleted meanwhile
		}
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, fmt.Errorf("loader: read-only %s: %w", p, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// SetTableSource gives a dataplane from FromFDs a way to fetch current
// descriptors (the agent's maps.open answer: ReadOnlyMaps, then every AV
// table) when an AV's table was replaced (growth). Without one such a
// reader fails with EOPBADSTATE once its table is retired.
func (d *Objects) SetTableSource(fetch func() ([]int, error)) {
	if d == nil {
		return
	}
	d.tabMu.Lock()
	d.tableSource = fetch
	d.tabMu.Unlock()
}

// handedTable returns a new handle on AV id's table among the handed-over
// descriptors, fetching fresh ones first when the one held is retired or
// missing.
func (d *Objects) handedTable(id uint32) (*ebpf.Map, error) {
	d.tabMu.Lock()
	defer d.tabMu.Unlock()
	if m := d.tables[id]; m != nil && !tableRetired(m) {
		return m.Clone()
	}
	if d.tableSource == nil {
		if d.tables[id] == nil {
			return nil, fmt.Errorf("no descriptor for AV %d's table was handed over: %w", id, fi.ENOENT)
		}
		return nil, fmt.Errorf("AV %d's table was replaced and no source of new descriptors is set: %w", id, fi.EOPBADSTATE)
	}
	fds, err := d.tableSource()
	if err != nil {
		return nil, err
	}
	for i, fd := range fds {
		if i < len(ReadOnlyMaps) {
			unix.Close(fd)
			continue
		}
		d.addTable(fd)
	}
	if m := d.tables[id]; m != nil {
		return m.Clone()
	}
	return nil, fmt.Errorf("open AV table %d: %w", id, fi.ENOENT)
}

// addTable takes over fd, an AV table's, and files it under the AV id its
// header names (read through the descriptor: it may be read-only). The
// caller holds d.tabMu (or owns d alone).
func (d *Objects) addTable(fd int) {
	if d.takeStamps(fd) {
		return
	}
	m, err := ebpf.NewMapFromFD(fd)
	if err != nil {
		return // NewMapFromFD closed it
	}
	var page [bpf.AVPage]byte
	if m.ValueSize() != bpf.AVPage || m.Lookup(uint32(0), &page) != nil {
		m.Close()
		return
	}
	hdr := pageHeader(&page)
	if hdr.Magic != bpf.AVMagic {
		m.Close()
		return
	}
	if d.tables == nil {
		d.tables = map[uint32]*ebpf.Map{}
	}
	if old := d.tables[hdr.AvId]; old != nil {
		old.Close()
	}
	d.tables[hdr.AvId] = m
}

// tableRetired reads a table's retired flag through its descriptor.
func tableRetired(m *ebpf.Map) bool {
	var page [bpf.AVPage]byte
	return m.Lookup(uint32(0), &page) != nil || pageHeader(&page).Retired != 0
}

// pageHeader decodes the header at the start of a table's first element.
func pageHeader(page *[bpf.AVPage]byte) bpf.AVHdr {
	var hdr bpf.AVHdr
	_, _ = binary.Decode(page[:bpf.AVLine], binary.NativeEndian, &hdr)
	return hdr
}

// namedAV finds the in-use AV slot called name in xdpfab_avmeta.
func (d *Objects) namedAV(name string) (uint32, bool) {
	n := d.AVMeta.MaxEntries()
	for id := uint32(1); id < n; id++ {
		var m bpf.AVMeta
		if d.AVMeta.Lookup(id, &m) == nil && m.InUse != 0 && m.NameString() == name {
			return id, true
		}
	}
	return 0, false
}
