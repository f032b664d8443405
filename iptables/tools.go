package iptables

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Backend is an iptables backend.
type Backend string

const (
	// Auto detects the backend: the one with more rules on the node, nft when both are
	// empty.
	Auto   Backend = ""
	Legacy Backend = "legacy"
	NFT    Backend = "nft"
)

// Prefix names the chains kube-ipvs owns, in both modes.
const Prefix = "KIPVS-"

// Config says how to run the tools; the IPVS-mode Runner and the iptables proxier share it.
type Config struct {
	// Backend forces a backend; Auto (empty) detects it once, on first use.
	Backend Backend
	// WaitSeconds is how long iptables-restore waits for the xtables lock (-w); 5 when 0.
	WaitSeconds int
}

// Validate reports a Config the tools cannot run with.
func (c Config) Validate() error {
	switch c.Backend {
	case Auto, Legacy, NFT:
	default:
		return fmt.Errorf("iptables backend %q: want legacy or nft (or empty to detect)", c.Backend)
	}
	if c.WaitSeconds < 0 {
		return fmt.Errorf("wait seconds %d must not be negative", c.WaitSeconds)
	}
	return nil
}

// Family selects iptables (V4) or ip6tables (V6). Its values index per-family arrays.
type Family int

const (
	V4 Family = iota
	V6
)

// Families are both families, in the order they are written.
var Families = []Family{V4, V6}

func (f Family) String() string {
	if f == V6 {
		return "ip6tables"
	}
	return "iptables"
}

// FamilyOf returns the family of an address (IPv4-mapped IPv6 counts as IPv4).
func FamilyOf(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return V4
	}
	return V6
}

// verb is the half of a tool's name after the backend.
type verb string

const (
	verbSave    verb = "save"
	verbRestore verb = "restore"
)

// toolName is the one place that names the tools: iptables-nft-save, ip6tables-legacy-restore.
func toolName(f Family, b Backend, v verb) string {
	return fmt.Sprintf("%s-%s-%s", f, b, v)
}

// Tools runs iptables-save and iptables-restore --noflush (and the ip6tables twins) on
// one backend, detected on first use. It counts every process it runs. It is not safe for
// concurrent use: its owners (Runner, the iptables proxier) serialize their calls.
type Tools struct {
	ex      Exec
	cfg     Config
	backend Backend
	execs   atomic.Uint64
}

// NewTools returns Tools that run the tools through ex. Nothing runs before the first call.
func NewTools(ex Exec, cfg Config) *Tools {
	if cfg.WaitSeconds == 0 {
		cfg.WaitSeconds = 5
	}
	return &Tools{ex: ex, cfg: cfg}
}

// Execs returns the number of processes run so far.
func (t *Tools) Execs() uint64 { return t.execs.Load() }

func (t *Tools) run(stdin []byte, name string, args ...string) ([]byte, error) {
	t.execs.Add(1)
	return t.ex.Run(stdin, name, args...)
}

// Installed reports whether both tools of a family (save and restore) are installed for a
// backend.
func (t *Tools) Installed(b Backend, f Family) bool {
	for _, v := range []verb{verbSave, verbRestore} {
		if _, err := t.ex.LookPath(toolName(f, b, v)); err != nil {
			return false
		}
	}
	return true
}

func (t *Tools) installedBoth(b Backend) bool { return t.Installed(b, V4) && t.Installed(b, V6) }

// Backend returns the backend in use, detecting it on first use: with Auto, it counts the
// rules iptables-legacy-save and iptables-nft-save (and the ip6tables ones) print and takes
// the backend with more, nft when they tie (a fresh node). A backend whose tools are not
// installed is never chosen.
func (t *Tools) Backend() (Backend, error) {
	if t.backend != "" {
		return t.backend, nil
	}
	if t.cfg.Backend != Auto {
		if t.cfg.Backend != Legacy && t.cfg.Backend != NFT {
			return "", fmt.Errorf("iptables backend %q: want legacy or nft", t.cfg.Backend)
		}
		if !t.installedBoth(t.cfg.Backend) {
			return "", fmt.Errorf("iptables backend %s: its tools (%s...) are not installed", t.cfg.Backend, toolName(V4, t.cfg.Backend, verbRestore))
		}
		t.backend = t.cfg.Backend
		return t.backend, nil
	}
	counts := map[Backend]int{}
	var avail []Backend
	for _, b := range []Backend{Legacy, NFT} {
		if !t.installedBoth(b) {
			continue
		}
		avail = append(avail, b)
		for _, f := range Families {
			s, err := t.SaveOn(b, f)
			if err != nil {
				return "", fmt.Errorf("detect iptables backend: %w", err)
			}
			counts[b] += s.RuleCount()
		}
	}
	switch {
	case len(avail) == 0:
		return "", errors.New("detect iptables backend: neither iptables-legacy-* nor iptables-nft-* (and ip6tables) tools are installed")
	case len(avail) == 1:
		t.backend = avail[0]
	case counts[Legacy] > counts[NFT]:
		t.backend = Legacy
	default:
		t.backend = NFT
	}
	return t.backend, nil
}

// Save lists a family's tables on the backend in use.
func (t *Tools) Save(f Family) (*Ruleset, error) {
	b, err := t.Backend()
	if err != nil {
		return nil, err
	}
	return t.SaveOn(b, f)
}

// SaveOn lists a family's tables on a given backend.
//
// A listing that fails is taken again, up to saveAttempts times: iptables-nft-save reads the
// ruleset in several requests, and a set or chain another process removes meanwhile (kube-
// proxy's leftovers being cleaned up, say) makes it fail ("Set with index 1 in kernel doesn't
// exist") though nothing is wrong.
func (t *Tools) SaveOn(b Backend, f Family) (*Ruleset, error) {
	var err error
	for attempt := range saveAttempts {
		if attempt > 0 {
			time.Sleep(saveRetryWait)
		}
		var out []byte
		if out, err = t.run(nil, toolName(f, b, verbSave)); err == nil {
			return ParseSave(out), nil
		}
	}
	return nil, err
}

// saveAttempts and saveRetryWait bound the retries of a failed listing.
const (
	saveAttempts  = 3
	saveRetryWait = 100 * time.Millisecond
)

// Restore runs tx through the family's iptables-restore --noflush on the backend in use.
func (t *Tools) Restore(f Family, tx *Transaction) error {
	b, err := t.Backend()
	if err != nil {
		return err
	}
	return t.RestoreOn(b, f, tx)
}

// RestoreOn runs tx on a given backend. A failure names the input line the tool reports.
func (t *Tools) RestoreOn(b Backend, f Family, tx *Transaction) error {
	input := tx.String()
	if _, err := t.run([]byte(input), toolName(f, b, verbRestore), "-w", strconv.Itoa(t.cfg.WaitSeconds), "--noflush"); err != nil {
		return lineContext(err, input)
	}
	return nil
}

// RemoveOurs removes every chain with the Prefix and every rule that jumps to one from all
// tables of both families, on every backend whose tools are installed (a node may have
// switched backends). It restores only where something of ours is found, and returns how
// many restores it ran. Everything else on the node stays.
func (t *Tools) RemoveOurs() (restores int, err error) {
	var errs []error
	for _, b := range []Backend{Legacy, NFT} {
		for _, f := range Families {
			if !t.Installed(b, f) {
				continue
			}
			s, err := t.SaveOn(b, f)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			tx := RemoveChains(s, IsOurs)
			if tx.Empty() {
				continue
			}
			restores++
			if err := t.RestoreOn(b, f, tx); err != nil {
				errs = append(errs, fmt.Errorf("remove %s chains: %w", Prefix, err))
			}
		}
	}
	return restores, errors.Join(errs...)
}

var failedLine = regexp.MustCompile(`line:? (\d+)`)

// lineContext adds the input line a restore error names ("line 3 failed"), so that the
// error says which rule the kernel refused.
func lineContext(err error, input string) error {
	m := failedLine.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	n, _ := strconv.Atoi(m[1])
	lines := strings.Split(input, "\n")
	if n < 1 || n > len(lines) {
		return err
	}
	return fmt.Errorf("%w (input line %d: %s)", err, n, lines[n-1])
}
