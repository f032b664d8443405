package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"os/exec"
	"time"
)

// AgentRequest is what cluster-host asks the node's agent to run (POST /run, JSON).
type AgentRequest struct {
	Argv    []string `json:"argv"`
	Timeout string   `json:"timeout,omitempty"` // a Go duration; default 60s
}

// AgentReply is the command's exit status and its combined output.
type AgentReply struct {
	Exit   int    `json:"exit"`
	Output string `json:"output"`
	Error  string `json:"error,omitempty"` // the command could not run
	// End is the node's clock when the command ended: what it printed is placed on the
	// node's time line, which the pods share (their logs and kipvs-echo ask's failures).
	End time.Time `json:"end"`
}

// agent serves POST /run (and GET /ipvs): the operator checks run what only the node itself can (a client
// in the network namespace that stands for another host, `ipvsadm` polled faster than
// kubectl exec allows). It listens on the node's address, which only the host's loopback
// reaches (through the CONNECT proxy); the guest has no route out.
func agent(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	listen := fs.String("listen", ":8133", "address to serve on")
	fs.Parse(args)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /run", func(w http.ResponseWriter, r *http.Request) {
		var req AgentRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Argv) == 0 {
			http.Error(w, "want {\"argv\": [...]}", http.StatusBadRequest)
			return
		}
		timeout := 60 * time.Second
		if req.Timeout != "" {
			d, err := time.ParseDuration(req.Timeout)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			timeout = d
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...).CombinedOutput()
		rep := AgentReply{Output: string(out), End: time.Now()}
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			rep.Exit = ee.ExitCode()
		case err != nil:
			rep.Exit, rep.Error = -1, err.Error()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
	// GET /ipvs: the IPVS table and connections as ipvsadm -Ln and -Lnc print them, read
	// from /proc without running anything (ipvsTables).
	mux.HandleFunc("GET /ipvs", func(w http.ResponseWriter, r *http.Request) {
		out, err := ipvsTables()
		rep := AgentReply{Output: out, End: time.Now()}
		if err != nil {
			rep.Exit, rep.Error = -1, err.Error()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
	// POST /ipvs/watch: when given virtual servers reach a number of real servers, looked
	// up by key (watchIPVS).
	mux.HandleFunc("POST /ipvs/watch", watchIPVS)
	// GET /now: the node's clock, to place what the agent stamps on the host's time line.
	mux.HandleFunc("GET /now", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(AgentReply{End: time.Now()})
	})
	return http.ListenAndServe(*listen, mux)
}
