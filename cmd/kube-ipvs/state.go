package main

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/introspect"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// drainReporter is the part of the IPVS mode's dataplane the state endpoint reads.
type drainReporter interface {
	DrainDeadlines() map[model.VSKey]map[model.RSKey]time.Time
}

// serveState serves the desired state on --state-socket for `list` and `explain`. As with
// the HTTP servers, a socket that cannot be opened is logged loudly and the proxy keeps
// programming the kernel without it: list then says the socket is unreachable.
func serveState(ctx context.Context, o runOptions, node, mode string, nodePortCIDRs []netip.Prefix, ctl *controller.Controller, dp dataplane.Dataplane, log *slog.Logger) {
	if o.StateSocket == "" {
		return
	}
	l, err := introspect.Listen(o.StateSocket)
	if err != nil {
		log.Error("state socket not served: kube-ipvs list and explain will not find it", "err", err)
		return
	}
	var fw *firewall.Config
	if mode == modeIPVS {
		c := o.ipvsMode.Firewall
		fw = &c
	}
	drains, _ := dp.(drainReporter)
	own := ownershipOf(o, nodePortCIDRs)
	doc := func() introspect.Document {
		in := introspect.Input{Node: node, Mode: mode, Ownership: own, Services: ctl.DesiredServices(), Firewall: fw,
			Checks: ctl.CheckStates, Now: time.Now()}
		if drains != nil {
			in.Draining = drains.DrainDeadlines()
		}
		return introspect.Build(in)
	}
	go func() {
		if err := introspect.Serve(ctx, l, doc); err != nil && ctx.Err() == nil {
			log.Error("state socket server stopped", "socket", o.StateSocket, "err", err)
		}
	}()
	log.Info("serving", "server", "state", "socket", o.StateSocket)
}

// ownershipOf is the ownership rule's settings, as the document carries them.
func ownershipOf(o runOptions, nodePortCIDRs []netip.Prefix) introspect.Ownership {
	own := introspect.Ownership{DummyInterface: o.DummyInterface, NodePortMin: o.ipvsMode.NodePortMin, NodePortMax: o.ipvsMode.NodePortMax}
	for _, p := range o.ipvsMode.ExcludeCIDRs {
		own.ExcludeCIDRs = append(own.ExcludeCIDRs, p.String())
	}
	for _, p := range nodePortCIDRs {
		own.NodePortCIDRs = append(own.NodePortCIDRs, p.String())
	}
	return own
}
