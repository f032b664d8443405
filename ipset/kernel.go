package ipset

import (
	"errors"
	"fmt"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

// Spec is a set as the kernel holds it: its definition plus its size.
type Spec struct {
	Name   firewall.SetName
	Type   firewall.SetType
	Family firewall.Family
	// HashSize and MaxElem size a hash set (the kernel may grow the hash size by itself,
	// never the maximum number of elements).
	HashSize, MaxElem uint32
	// PortFrom and PortTo bound a bitmap:port set.
	PortFrom, PortTo uint16
	// SkbInfo: the set's entries carry a packet mark (firewall.SetDef.SkbInfo).
	SkbInfo bool
}

// Header is a set's header as listed: its spec, how many entries it has, and how many
// iptables rules reference it.
type Header struct {
	Spec
	Entries    uint32
	References uint32
}

// Kernel is the ipset netlink interface the reconciler uses. NewKernel returns the real one
// (netlink in a network namespace, never the ipset binary); FakeKernel is an in-memory one.
// Each method is one netlink request, so a test that counts calls counts kernel work.
type Kernel interface {
	// ListHeaders lists every set's header, without entries, in one dump. It fails rather
	// than return a listing the kernel marked interrupted (ErrDumpInterrupted).
	ListHeaders() ([]Header, error)
	// EachEntry lists one set's entries, handing each to fn as it is parsed, so that a set
	// of half a million entries is never held as one listing (ListEntries collects them);
	// ErrSetNotFound if there is no such set. On an error, fn may have seen some entries.
	EachEntry(name firewall.SetName, fn func(firewall.Entry)) error
	// Create creates an empty set; ErrSetExists if the name is taken.
	Create(s Spec) error
	// Destroy destroys a set; ErrSetNotFound if absent, ErrSetInUse while iptables rules
	// reference it.
	Destroy(name firewall.SetName) error
	// Swap exchanges the contents (and definitions) of two sets atomically; rules that
	// reference either name keep referencing that name. ErrTypeMismatch when the kernel
	// refuses to swap sets of different types or families.
	Swap(a, b firewall.SetName) error
	// Add adds entries in one request; entries already present are not an error. On an
	// error, some of the entries may have been added.
	Add(name firewall.SetName, entries []firewall.Entry) error
	// Del deletes entries in one request; entries already absent are not an error. On an
	// error, some of the entries may have been deleted.
	Del(name firewall.SetName, entries []firewall.Entry) error
}

// Errors Kernel calls wrap, so callers can tell the cases apart.
var (
	ErrSetNotFound     = errors.New("set does not exist")
	ErrSetExists       = errors.New("set already exists")
	ErrSetInUse        = errors.New("set is referenced by iptables rules")
	ErrSetFull         = errors.New("set is full")
	ErrTypeMismatch    = errors.New("sets differ in type or family")
	ErrDumpInterrupted = errors.New("ipset listing interrupted; result not trusted")
)

// Size returns the hash size and maximum element count for a set of n entries: the hash
// size is a power of two of at least n/4 (at least 1024), the maximum twice the content (at
// least 65,536), so a set grows to double its size before it must be rebuilt.
func Size(n int) (hashSize, maxElem uint32) {
	hashSize = 1024
	for int(hashSize) < (n+3)/4 {
		hashSize *= 2
	}
	maxElem = 65536
	if 2*n > int(maxElem) {
		maxElem = uint32(2 * n)
	}
	return hashSize, maxElem
}

// specFor is the spec a set of that definition gets for n entries.
func specFor(d firewall.SetDef, n int) Spec {
	s := Spec{Name: d.Name, Type: d.Type, Family: d.Family, PortFrom: d.PortFrom, PortTo: d.PortTo, SkbInfo: d.SkbInfo}
	if d.Type != firewall.BitmapPort {
		s.HashSize, s.MaxElem = Size(n)
	}
	return s
}

// fits reports whether a set the kernel has can hold the definition with n entries
// without a rebuild.
func fits(h Spec, d firewall.SetDef, n int) error {
	switch {
	case h.Type != d.Type:
		return fmt.Errorf("type %s, want %s", h.Type, d.Type)
	case h.Family != d.Family:
		return fmt.Errorf("family %s, want %s", h.Family, d.Family)
	case h.SkbInfo != d.SkbInfo:
		return fmt.Errorf("skbinfo %v, want %v", h.SkbInfo, d.SkbInfo)
	case d.Type == firewall.BitmapPort && (h.PortFrom != d.PortFrom || h.PortTo != d.PortTo):
		return fmt.Errorf("range %d-%d, want %d-%d", h.PortFrom, h.PortTo, d.PortFrom, d.PortTo)
	case d.Type != firewall.BitmapPort && int(h.MaxElem) < n:
		return fmt.Errorf("maxelem %d, too small for %d entries", h.MaxElem, n)
	}
	return nil
}
