//go:build guest

package ipvs

import (
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Batching is why a cold start is fast: the writes of one Apply go out maxBatchMsgs per
// send, and a send that fails nothing is answered by one acknowledgement, read with one
// receive. So 6,000 writes take 15 sends and 15 receives, whatever the machine's load; a
// change that made the socket wait before reading (a second system call per answer) or
// that acknowledged every write would show here, where timings are too noisy to.
func TestGuestBatchSystemCalls(t *testing.T) {
	k := newKernel(t)
	g := k.(*netlinkKernel).g
	r := NewReconciler(k)
	want := map[model.VSKey]*model.VirtualServer{}
	for i := range 1000 {
		v := scaleVS(9000+i, 5)
		want[v.Key] = v
	}
	t.Cleanup(func() {
		del := map[model.VSKey]*model.VirtualServer{}
		for key := range want {
			del[key] = nil
		}
		r.Apply(del)
	})
	before := g.systemCalls()
	res := r.Apply(want)
	calls := g.systemCalls() - before
	expectClean(t, res, 6000)
	sends := (res.Writes + maxBatchMsgs - 1) / maxBatchMsgs
	t.Logf("%d writes in %d system calls", res.Writes, calls)
	if calls > uint64(2*sends) {
		t.Errorf("%d writes took %d system calls, want at most %d (%d sends, one receive each)", res.Writes, calls, 2*sends, sends)
	}
}
