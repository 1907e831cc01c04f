package agent

import (
	"context"
	"time"

	"github.com/xdpfab/xdpfab/loader"
)

// The AV change stamps (loader/stamps.go): clients of the agent read AVs
// from copies of their tables (they cannot map them), and answer from a
// copy only while its AV's stamp in the agent's page has not moved. The
// agent moves an AV's stamp after each change it makes (package av does,
// through the dataplane), and stampInterval after a change another process
// made (a root process with the library): a client's copy of such a
// change is that late at most.

// stampInterval is how often the agent looks for AV changes other
// processes made (one batch read of the AV metadata).
const stampInterval = 50 * time.Millisecond

// startStamps makes the stamp page and publishes the AVs' state in it.
func (a *Agent) startStamps() error {
	p, err := loader.NewStampPage(int(a.dp.Config().MaxAVs))
	if err != nil {
		return err
	}
	a.dp.SetStampPage(p)
	return a.dp.SyncStamps()
}

// stampLoop moves the stamps of AVs other processes changed until ctx
// ends.
func (a *Agent) stampLoop(ctx context.Context) {
	t := time.NewTicker(stampInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := a.dp.SyncStamps(); err != nil {
				a.log.Warn("AV change stamps", "err", err)
			}
		}
	}
}
