package proxy

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// choiceSource is a Service's model.ChoiceSource: what realsFor worked with, kept so that
// explain can judge the endpoints again instead of every Service holding its judgements.
// The slices are the caller's (the informers' objects, which nobody modifies): it adds
// only a few words per port. It keeps no real server map: the controller keeps an
// unchanged virtual server's previous object, and a reference to the new map would keep
// a second copy of it alive.
type choiceSource struct {
	slices             []*discoveryv1.EndpointSlice
	nodeName, nodeZone string // all of Config that judging endpoints reads
	ports              []choicePort
}

// choicePort is one call of realsFor: a port, family and policy.
type choicePort struct {
	name       string
	protocol   v1.Protocol
	is6, local bool
}

// EndpointChoices judges the endpoints again, in the order realsFor first did: the same
// inputs give the same endpoints and the same selection. The health-check verdicts need
// not be known: they change weights (applyVerdicts), never which endpoints are chosen.
func (c *choiceSource) EndpointChoices() []model.EndpointChoice {
	cfg := &Config{NodeName: c.nodeName, NodeZone: c.nodeZone}
	var out []model.EndpointChoice
	var probs problems // reported when the state was built
	for _, p := range c.ports {
		sp := v1.ServicePort{Name: p.name, Protocol: p.protocol}
		eps := collectEndpoints(c.slices, &sp, p.is6, cfg, &probs)
		out = appendChoices(out, eps, selectReals(eps, p.local, cfg), p.name, p.local, cfg)
	}
	return out
}
