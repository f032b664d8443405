package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/kube-ipvs/kube-ipvs/cleanup"
)

// report is what `kube-ipvs cleanup` prints; as JSON (-o json) it is the object itself.
type report struct {
	DryRun    bool             `json:"dryRun"`
	KubeProxy bool             `json:"kubeProxy"`
	Objects   []cleanup.Object `json:"objects"`
	Failed    int              `json:"failed"`
	Notes     []string         `json:"notes,omitempty"`
}

// write prints the report. As text: one line per object on stdout ("would remove ..." in a
// dry run, "removed ..." otherwise), each failure and note on stderr.
func (r report) write(stdout, stderr io.Writer, format string) error {
	r.Failed = len(cleanup.Failed(r.Objects))
	if r.Objects == nil {
		r.Objects = []cleanup.Object{}
	}
	if format == "json" {
		e := json.NewEncoder(stdout)
		e.SetIndent("", "  ")
		return e.Encode(r)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(stderr, "kube-ipvs cleanup: note: %s\n", n)
	}
	verb := "removed"
	if r.DryRun {
		verb = "would remove"
	}
	for _, o := range r.Objects {
		if o.Error != "" {
			fmt.Fprintf(stderr, "kube-ipvs cleanup: could not remove %s: %s\n", o, o.Error)
			continue
		}
		fmt.Fprintf(stdout, "%s %s\n", verb, o)
	}
	if len(r.Objects) == 0 {
		fmt.Fprintln(stdout, "nothing to remove")
	}
	return nil
}
