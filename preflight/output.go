package preflight

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// WriteJSON writes the report as one JSON document:
// {"ipvsUsable": bool, "checks": [{"name", "status", "detail", "fix"}]}.
func (r Report) WriteJSON(w io.Writer) error {
	out := r
	if out.Checks == nil {
		out.Checks = []Row{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // fixes hold "&&"
	return enc.Encode(out)
}

// WriteTable writes the report as a table with aligned columns (CHECK, STATUS, DETAIL,
// FIX), one row per check, then a verdict line.
func (r Report) WriteTable(w io.Writer) error {
	rows := [][]string{{"CHECK", "STATUS", "DETAIL", "FIX"}}
	for _, c := range r.Checks {
		fix := c.Fix
		if fix == "" {
			fix = "-"
		}
		name := c.Name
		if c.Required {
			name += " *"
		}
		rows = append(rows, []string{name, string(c.Status), c.Detail, fix})
	}
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, cell := range row {
			if i == len(row)-1 {
				b.WriteString(cell)
				break
			}
			b.WriteString(cell)
			b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell)+2))
		}
		b.WriteString("\n")
	}
	b.WriteString("(* required for IPVS mode)\n")
	if r.IPVSUsable {
		b.WriteString("IPVS mode: usable\n")
	} else {
		var names []string
		for _, c := range r.Blocking() {
			names = append(names, c.Name)
		}
		fmt.Fprintf(&b, "IPVS mode: NOT usable (%s); kube-ipvs would fall back\n", strings.Join(names, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
