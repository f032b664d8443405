package cleanup

import (
	"errors"
	"time"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
)

// setReleaseWait bounds how long destroying a set waits for the kernel to let go of it once
// the rules that matched it are removed. iptables-nft's restore returns when nf_tables has
// committed, but the kernel frees the removed rules' expressions later, from a work item
// (nf_tables' asynchronous release), and only then does each xt_set match drop its
// reference to its set: a destroy right after the rules' removal can see the set still
// referenced (EBUSY). Seen on Debian 11's 5.10 under load; the release is deferred on the
// newer kernels too. A set still referenced after the wait is someone else's rule's.
var setReleaseWait = 5 * time.Second

// destroyWhenReleased destroys the set, trying again while the kernel says it is referenced,
// until setReleaseWait has passed.
func destroyWhenReleased(k ipset.Kernel, name firewall.SetName) error {
	deadline := time.Now().Add(setReleaseWait)
	delay := 10 * time.Millisecond
	for {
		err := k.Destroy(name)
		if !errors.Is(err, ipset.ErrSetInUse) || time.Now().Add(delay).After(deadline) {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, 500*time.Millisecond)
	}
}
