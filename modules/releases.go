package modules

import (
	"fmt"

	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// schedulerSince is the first Linux release of each IPVS scheduler newer than the oldest
// kernel the project tests (Debian 11's 5.10): the others are in every supported kernel.
// twos ("weighted random twos choice") came with 6.7.
var schedulerSince = map[string][2]int{"twos": {6, 7}}

// SchedulerNeedsKernel returns the first Linux release ("6.7") that has the scheduler, when
// the kernel of that release is older; "" when the kernel is new enough or cannot be parsed.
func SchedulerNeedsKernel(sched, release string) string {
	since, ok := schedulerSince[sched]
	if !ok {
		return ""
	}
	maj, min, ok := sysctl.Version(release)
	if !ok || maj > since[0] || maj == since[0] && min >= since[1] {
		return ""
	}
	return fmt.Sprintf("%d.%d", since[0], since[1])
}
