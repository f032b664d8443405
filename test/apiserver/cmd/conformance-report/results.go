package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
)

// results is cluster-host's results.json (test/apiserver/cmd/cluster-host/conformance.go).
type results struct {
	Proxy      string     `json:"proxy"`
	Kubernetes string     `json:"kubernetes"`
	Focus      string     `json:"focus"`
	Skip       string     `json:"skip"`
	Procs      int        `json:"procs"`
	Command    string     `json:"command"`
	Build      string     `json:"build"`
	SuiteKey   string     `json:"suiteKey"`
	Started    time.Time  `json:"started"`
	Seconds    float64    `json:"seconds"`
	Passed     int        `json:"passed"`
	Failed     int        `json:"failed"`
	Skipped    int        `json:"skipped"`
	NotRun     int        `json:"notSelected"`
	Specs      []spec     `json:"specs"`
	Excluded   []excluded `json:"excluded"`
}

// spec is one spec that ran or skipped itself.
type spec struct {
	Name    string  `json:"name"`
	State   string  `json:"state"` // passed, failed or skipped
	Seconds float64 `json:"seconds"`
	Message string  `json:"message"` // a failure's first line, or the reason a spec skipped itself
}

// excluded is a spec of the focus that a term of the skip left out.
type excluded struct {
	Name string `json:"name"`
	Term string `json:"term"`
}

// find returns the spec named name, or nil.
func (r *results) find(name string) *spec {
	if r == nil {
		return nil
	}
	for i := range r.Specs {
		if r.Specs[i].Name == name {
			return &r.Specs[i]
		}
	}
	return nil
}

// suiteKey is the cache key of the e2e.test and images the run used. Files written before
// results.json had the field carry it only in the build string run.sh writes
// ("..., e2e.test and images KEY"), so it is read from there.
func (r *results) suiteKey() string {
	if r.SuiteKey != "" {
		return r.SuiteKey
	}
	const marker = "e2e.test and images "
	i := strings.LastIndex(r.Build, marker)
	if i < 0 {
		return ""
	}
	key, _, _ := strings.Cut(r.Build[i+len(marker):], " ")
	return key
}

// readResults returns nil for a file that does not exist: that run has not been made.
func readResults(path string) (*results, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}
