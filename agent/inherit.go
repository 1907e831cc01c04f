package agent

import (
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/internal/procid"
)

// inheritedEP is an endpoint an earlier run of the agent prepared and
// charged (bpf.EPFCharged, with the uid it charged), found in the pinned
// endpoint table at start with its owner still running: that uid is
// charged its XSKMAP slots and one endpoint again until the entry leaves
// the table (gc reclaims it once the owner is gone). Without that a
// restart handed every uid its whole quota again beside what it still
// held. Endpoints that processes registered themselves (the library, as
// root) are not the agent's and are not charged. Frame memory is not
// charged: the table does not record it.
type inheritedEP struct {
	uid   uint32
	owner procid.ID
	slots int
}

// inherit charges the endpoints an earlier agent prepared, and whose
// owners still run, to the uids it charged them to: at start, before the
// control socket serves anyone. Entries whose owner is gone are left to
// gc.
func (a *Agent) inherit() error {
	entries, err := ep.Entries(a.dp)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range entries {
		owner := procid.ID{PID: e.OwnerPID, Start: e.OwnerStart}
		if !e.Charged || e.OwnerPID == 0 || !owner.Alive() {
			continue
		}
		uid := e.ChargedUID
		if a.inherited == nil {
			a.inherited = map[uint32]inheritedEP{}
		}
		a.inherited[e.ID] = inheritedEP{uid: uid, owner: owner, slots: e.Slots}
		u := a.usageOf(uid)
		u.endpoints++
		u.slots += e.Slots
		a.audit(self(), "ep.charge", nil, &auditRec{attrs: []any{"id", e.ID, "local", e.Local, "owner_pid", e.OwnerPID,
			"charged_uid", uid, "xsk_slots", e.Slots, "reason", "prepared by an earlier agent"}})
	}
	return nil
}

// dropInheritedID gives back the charge of the inherited endpoint id, if
// any: the agent just prepared an endpoint with that id, so the entry it
// named is gone (between a gc's reclaim and its dropInherited, or before
// a gc noticed).
func (a *Agent) dropInheritedID(id uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.uncharge(id)
}

// uncharge gives back inherited endpoint id's charge; a.mu held.
func (a *Agent) uncharge(id uint32) {
	h, ok := a.inherited[id]
	if !ok {
		return
	}
	u := a.usageOf(h.uid)
	u.endpoints--
	u.slots -= h.slots
	a.forgetIdle(h.uid)
	delete(a.inherited, id)
}

// dropInherited gives back the charge of inherited endpoints that left the
// table (or whose id now names another owner's endpoint): gc's.
func (a *Agent) dropInherited() {
	a.mu.Lock()
	n := len(a.inherited)
	a.mu.Unlock()
	if n == 0 {
		return
	}
	entries, err := ep.Entries(a.dp)
	if err != nil {
		a.log.Warn("read the endpoint table", "err", err)
		return
	}
	now := make(map[uint32]procid.ID, len(entries))
	for _, e := range entries {
		now[e.ID] = procid.ID{PID: e.OwnerPID, Start: e.OwnerStart}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, h := range a.inherited {
		if owner, ok := now[id]; !ok || owner != h.owner {
			a.uncharge(id)
		}
	}
}
