package proxy

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// choiceSource is a Service's model.ChoiceSource: what realsFor worked with, kept so that
// explain can judge the endpoints again instead of every Service holding its judgements.
// The slices are the caller's (the informers' objects, which nobody modifies) and the
// real server maps those of the virtual servers: it adds only a few words per port.
type choiceSource struct {
	slices             []*discoveryv1.EndpointSlice
	nodeName, nodeZone string // all of Config that judging endpoints reads
	ports              []choicePort
}

// choicePort is one call of realsFor: a port, family and policy, and the real servers chosen
// for it (after the health-check verdicts).
type choicePort struct {
	name       string
	protocol   v1.Protocol
	is6, local bool
	reals      map[model.RSKey]uint32
}

// EndpointChoices judges the endpoints again, in the order realsFor first did: the same
// inputs give the same endpoints, and reals says which of them were chosen.
func (c *choiceSource) EndpointChoices() []model.EndpointChoice {
	cfg := &Config{NodeName: c.nodeName, NodeZone: c.nodeZone}
	var out []model.EndpointChoice
	var probs problems // reported when the state was built
	for _, p := range c.ports {
		sp := v1.ServicePort{Name: p.name, Protocol: p.protocol}
		eps := collectEndpoints(c.slices, &sp, p.is6, cfg, &probs)
		out = appendChoices(out, eps, p.reals, p.name, p.local, cfg)
	}
	return out
}
