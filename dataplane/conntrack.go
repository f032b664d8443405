package dataplane

import (
	"log/slog"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Conntrack deletes connection-tracking entries (package conntrack's Cleaner).
type Conntrack interface {
	ClearRealServer(vs model.VSKey, rs model.RSKey) (uint, error)
	ClearVirtualServer(vs model.VSKey) (uint, error)
}

// RealServerRef names one real server of one virtual server.
type RealServerRef struct {
	VS model.VSKey
	RS model.RSKey
}

// UDPFlows are the UDP conntrack entries a change makes stale, in both modes: a UDP
// flow's binding to an endpoint lives in its conntrack entry, so without clearing a client
// that keeps sending from one port keeps reaching a removed endpoint.
type UDPFlows struct {
	// Removed are UDP real servers that went away.
	Removed []RealServerRef
	// First are UDP virtual servers that went from no real server to some: entries made
	// while there was none point nowhere.
	First []model.VSKey
}

// ClearUDPFlows deletes the entries of f. A failed clearing is logged, not retried: the
// flow expires on its own later, and the change itself is in place.
func ClearUDPFlows(ct Conntrack, log *slog.Logger, f UDPFlows) {
	if ct == nil {
		return
	}
	for _, x := range f.Removed {
		if n, err := ct.ClearRealServer(x.VS, x.RS); err != nil {
			log.Warn("clearing conntrack entries of a removed UDP endpoint", "virtual_server", x.VS, "real_server", x.RS, "err", err)
		} else if n > 0 {
			log.Info("cleared conntrack entries of a removed UDP endpoint", "virtual_server", x.VS, "real_server", x.RS, "entries", n)
		}
	}
	for _, vs := range f.First {
		if n, err := ct.ClearVirtualServer(vs); err != nil {
			log.Warn("clearing stale conntrack entries of a UDP Service", "virtual_server", vs, "err", err)
		} else if n > 0 {
			log.Info("cleared stale conntrack entries of a UDP Service", "virtual_server", vs, "entries", n)
		}
	}
}
