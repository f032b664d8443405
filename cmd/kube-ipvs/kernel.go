package main

import (
	"time"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/controller/adapters"
)

// The kernel reconcilers are connected to the controller's interfaces by package adapters,
// which the scale bench (package bench) uses too, so both run the same code.

func newIPVS(drainTimeout time.Duration) (controller.IPVS, error) {
	r, err := adapters.NewIPVS(drainTimeout)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func newAddresses(name string) controller.Addresses { return adapters.NewAddresses(name) }
