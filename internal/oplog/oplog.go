// Package oplog is the call log that the in-memory fakes (ipset, ipvs, iptables, dummyif,
// preflight) keep for tests: every call a fake answers is appended as one line, and a test
// takes the lines to assert which kernel calls a piece of logic made, in which order.
//
// It is internal because it is test plumbing of this module's fakes, not an API.
package oplog

import "sync"

// Log is an append-only list of logged calls, safe for concurrent use. Embed it in a fake:
// the fake's methods call Record, and tests call the promoted TakeOps. Its zero value is an
// empty log. It has its own lock, so a fake may record while holding its own.
type Log struct {
	mu  sync.Mutex
	ops []string
}

// Record appends lines to the log, in order.
func (l *Log) Record(lines ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, lines...)
}

// TakeOps returns the lines logged since the last TakeOps and clears the log.
func (l *Log) TakeOps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ops := l.ops
	l.ops = nil
	return ops
}
