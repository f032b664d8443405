package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/moby/ipvs"
)

// WatchRequest asks the agent to watch virtual servers until each holds a number of real
// servers (POST /ipvs/watch): make sli's probe of when a change reached the kernel.
type WatchRequest struct {
	VS []WatchedVS `json:"vs"`
	// Timeout bounds the whole watch and Every is the pause between two looks (Go
	// durations; defaults 60s and 200ms).
	Timeout string `json:"timeout,omitempty"`
	Every   string `json:"every,omitempty"`
}

// WatchedVS is one virtual server by address, port and protocol, and the number of real
// servers to wait for: those with a weight, as a real server being drained (weight 0, its
// connections left to end) takes no new connection.
type WatchedVS struct {
	Addr  string `json:"addr"`
	Port  uint16 `json:"port"`
	Proto string `json:"proto"` // TCP, UDP or SCTP
	Reals int    `json:"reals"`
}

// WatchReply holds, per virtual server in the request's order, the node's clock when it
// was first seen with that many real servers (zero: not within the timeout), and the
// node's clock when the reply was made.
type WatchReply struct {
	Seen  []time.Time `json:"seen"`
	Error string      `json:"error,omitempty"`
	End   time.Time   `json:"end"`
}

// watchIPVS looks at each virtual server by its key (a get of the service and a dump of its
// destinations: a lookup in the kernel's hash table, never a listing of the whole table)
// every Every until each holds its number of real servers or Timeout passes.
func watchIPVS(w http.ResponseWriter, r *http.Request) {
	var req WatchRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.VS) == 0 {
		http.Error(w, `want {"vs": [{"addr": ..., "port": ..., "proto": ..., "reals": ...}]}`, http.StatusBadRequest)
		return
	}
	timeout, every, err := durations(req.Timeout, req.Every)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	svcs := make([]*ipvs.Service, len(req.VS))
	for i, v := range req.VS {
		if svcs[i], err = serviceOf(v); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	rep := WatchReply{Seen: make([]time.Time, len(req.VS))}
	h, err := ipvs.New("")
	if err != nil {
		rep.Error = err.Error()
	} else {
		defer h.Close()
		deadline := time.Now().Add(timeout)
		for left := len(svcs); left > 0 && time.Now().Before(deadline) && r.Context().Err() == nil; {
			for i, svc := range svcs {
				if !rep.Seen[i].IsZero() {
					continue
				}
				if dests, err := h.GetDestinations(svc); err == nil && serving(dests) == req.VS[i].Reals {
					rep.Seen[i] = time.Now()
					left--
				}
			}
			time.Sleep(every)
		}
	}
	rep.End = time.Now()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep)
}

func durations(timeout, every string) (time.Duration, time.Duration, error) {
	t, e := 60*time.Second, 200*time.Millisecond
	var err error
	if timeout != "" {
		if t, err = time.ParseDuration(timeout); err != nil {
			return 0, 0, fmt.Errorf("timeout: %w", err)
		}
	}
	if every != "" {
		if e, err = time.ParseDuration(every); err != nil {
			return 0, 0, fmt.Errorf("every: %w", err)
		}
	}
	return t, e, nil
}

// serviceOf is the moby/ipvs key of a watched virtual server.
func serviceOf(v WatchedVS) (*ipvs.Service, error) {
	ip := net.ParseIP(v.Addr)
	if ip == nil {
		return nil, fmt.Errorf("%q is not an address", v.Addr)
	}
	svc := &ipvs.Service{Address: ip, Port: v.Port, AddressFamily: syscall.AF_INET}
	if ip.To4() == nil {
		svc.AddressFamily = syscall.AF_INET6
	} else {
		svc.Address = ip.To4()
	}
	switch strings.ToUpper(v.Proto) {
	case "TCP":
		svc.Protocol = syscall.IPPROTO_TCP
	case "UDP":
		svc.Protocol = syscall.IPPROTO_UDP
	case "SCTP":
		svc.Protocol = syscall.IPPROTO_SCTP
	default:
		return nil, fmt.Errorf("protocol %q: want TCP, UDP or SCTP", v.Proto)
	}
	return svc, nil
}

// serving counts the real servers with a weight.
func serving(dests []*ipvs.Destination) int {
	n := 0
	for _, d := range dests {
		if d.Weight > 0 {
			n++
		}
	}
	return n
}
