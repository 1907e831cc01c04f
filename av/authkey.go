package av

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// Auth-key handles are fi_addr values with bit 31 set, so they can never be
// confused with an address index (at most MaxIndex).
const keyBit = 1 << 31

func keyAddr(h uint32) fi.Addr { return fi.Addr(keyBit | h) }

// IsAuthKeyAddr reports whether fa is an auth-key handle from InsertAuthKey.
func IsAuthKeyAddr(fa fi.Addr) bool { return fa&^(keyBit|0x7fffffff) == 0 && fa&keyBit != 0 }

// keyHandle returns the in-use auth-key handle fa names.
func (a *AV) keyHandle(fa fi.Addr) (uint32, bool) {
	if !IsAuthKeyAddr(fa) {
		return 0, false
	}
	h := uint32(fa &^ keyBit)
	if h >= uint32(len(a.keys)) || a.keys[h].value == 0 {
		return 0, false
	}
	return h, true
}

// InsertAuthKey adds an auth key to the AV (fi_av_insert_auth_key) and
// returns its handle, to pass with fi.AuthKey to Insert, Remove, SetUserID
// and LookupAuthKey. An xdpfab key is AuthKeySize bytes: a nonzero 32-bit
// value, big endian, that endpoints enabled with it carry on the wire.
// Inserting a key the AV holds returns its existing handle. flags must be 0.
func (a *AV) InsertAuthKey(key []byte, flags fi.Flags) (fi.Addr, error) {
	if err := a.usable("av insert_auth_key"); err != nil {
		return fi.AddrNotAvail, err
	}
	unlock := a.lock()
	defer unlock()
	if flags != 0 {
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: flags %v must be 0: %w", flags, fi.EBADFLAGS)
	}
	if len(key) != AuthKeySize {
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: key of %d bytes, want %d: %w", len(key), AuthKeySize, fi.EINVAL)
	}
	value := binary.BigEndian.Uint32(key)
	if value == 0 {
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: the zero key means none: %w", fi.EINVAL)
	}
	if err := a.begin(true); err != nil {
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: %w", err)
	}
	h := uint32(len(a.keys))
	for i := range a.keys {
		if a.keys[i].value == value {
			return keyAddr(uint32(i)), nil
		}
		if a.keys[i].value == 0 && h == uint32(len(a.keys)) {
			h = uint32(i)
		}
	}
	if h >= MaxAuthKeys {
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: all %d auth keys in use: %w", MaxAuthKeys, fi.ENOSPC)
	}
	k := authKey{value: value, userID: uint64(fi.AddrNotAvail), key: append([]byte(nil), key...)}
	if err := a.putKey(h, &k); err != nil {
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: %w", err)
	}
	if h == uint32(len(a.keys)) {
		a.keys = append(a.keys, authKey{})
	}
	a.keys[h] = k
	return keyAddr(h), a.commit()
}

func (a *AV) putKey(h uint32, k *authKey) error {
	v := bpf.AuthKeyVal{UserId: k.userID, Len: uint32(len(k.key)), Value: k.value}
	copy(v.Key[:], k.key)
	err := a.dp.AuthKey.Put(bpf.RevKey{AvId: a.id, Index: h}, &v)
	if errors.Is(err, unix.E2BIG) {
		return fmt.Errorf("auth key map full (%d keys node-wide): %w", a.dp.AuthKey.MaxEntries(), fi.ENOSPC)
	}
	return err
}

// LookupAuthKey copies the auth key of fiAddr, an auth-key handle or an
// address inserted with fi.AuthKey, into buf (truncated to it) and returns
// the key's full size (fi_av_lookup_auth_key's auth_key_size on output).
// An address bound to no key fails with ENOKEY.
func (a *AV) LookupAuthKey(fiAddr fi.Addr, buf []byte) (int, error) {
	if err := a.usable("av lookup_auth_key"); err != nil {
		return 0, err
	}
	unlock := a.lock()
	defer unlock()
	if err := a.begin(false); err != nil {
		return 0, fmt.Errorf("av lookup_auth_key: %w", err)
	}
	h, ok := a.keyHandle(fiAddr)
	if !ok {
		idx, isAddr := a.index(fiAddr)
		switch {
		case !isAddr:
			return 0, fmt.Errorf("av lookup_auth_key: %v is neither an auth key nor an address of the AV: %w", fiAddr, fi.EINVAL)
		}
		_, pos, _ := a.tab.Aux(idx)
		s, _ := a.tab.ReadSlot(pos)
		if h, ok = a.keyOf(s.AuthKey); !ok {
			return 0, fmt.Errorf("av lookup_auth_key: fi_addr %v is bound to no auth key: %w", fiAddr, fi.ENOKEY)
		}
	}
	copy(buf, a.keys[h].key)
	return len(a.keys[h].key), nil
}

// removeKeys removes auth keys (Remove with fi.AuthKey). A key still
// bound to addresses or enabled on endpoints fails with EBUSY.
func (a *AV) removeKeys(fiAddr []fi.Addr) error {
	var first error
	failed, removed := 0, 0
	fail := func(err error) {
		failed++
		if first == nil {
			first = err
		}
	}
	for _, fa := range fiAddr {
		h, ok := a.keyHandle(fa)
		if !ok {
			fail(fmt.Errorf("%v is not an auth key of the AV: %w", fa, fi.EINVAL))
			continue
		}
		if n := a.keyUsers(h); n > 0 || a.keys[h].inUse > 0 {
			fail(fmt.Errorf("auth key %v: %d address(es) and %d endpoint(s) use it: %w", fa, n, a.keys[h].inUse, fi.EBUSY))
			continue
		}
		if err := a.dp.AuthKey.Delete(bpf.RevKey{AvId: a.id, Index: h}); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			fail(fmt.Errorf("auth key %v: %w", fa, err))
			continue
		}
		a.keys[h] = authKey{}
		removed++
	}
	if removed == 0 {
		// Nothing changed: no generation bump.
	} else if err := a.commit(); err != nil {
		return fmt.Errorf("av remove auth key: %w", err)
	}
	if first != nil {
		return fmt.Errorf("av remove auth key: %d of %d failed: %w", failed, len(fiAddr), first)
	}
	return nil
}

func (a *AV) keyUsers(h uint32) int {
	n, value := 0, a.keys[h].value
	for idx := range a.tab.High() {
		if _, pos, refcnt := a.tab.Aux(idx); refcnt > 0 {
			if s, _ := a.tab.ReadSlot(pos); s.AuthKey == value {
				n++
			}
		}
	}
	return n
}

// keyOf returns the handle of the auth key whose wire value is value (a
// table slot holds the value: the XDP program compares it with the
// endpoint's); false for 0, no key. Values are unique within an AV.
func (a *AV) keyOf(value uint32) (uint32, bool) {
	if value == 0 {
		return 0, false
	}
	for h := range a.keys {
		if a.keys[h].value == value {
			return uint32(h), true
		}
	}
	return 0, false
}

// AcquireAuthKey enables an endpoint with auth key fa: it returns the key's
// wire value and keeps the key from being removed until ReleaseAuthKey.
func (a *AV) AcquireAuthKey(fa fi.Addr) (uint32, error) {
	if err := a.usable("av acquire auth key"); err != nil {
		return 0, err
	}
	unlock := a.lock()
	defer unlock()
	if err := a.begin(false); err != nil {
		return 0, fmt.Errorf("av acquire auth key: %w", err)
	}
	h, ok := a.keyHandle(fa)
	if !ok {
		return 0, fmt.Errorf("av acquire auth key: %v is not an auth key of the AV: %w", fa, fi.EINVAL)
	}
	a.keys[h].inUse++
	return a.keys[h].value, nil
}

// ReleaseAuthKey undoes AcquireAuthKey. On a nil or zero AV it does
// nothing.
func (a *AV) ReleaseAuthKey(fa fi.Addr) {
	if a == nil || a.dp == nil {
		return
	}
	unlock := a.lock()
	defer unlock()
	if h, ok := a.keyHandle(fa); ok && a.keys[h].inUse > 0 {
		a.keys[h].inUse--
	}
}
