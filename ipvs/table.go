package ipvs

import "github.com/kube-ipvs/kube-ipvs/model"

// TableVS is one virtual server as `ipvsadm -Ln --stats --rate` shows it: what
// `kube-ipvs list` reads from the kernel.
type TableVS struct {
	Key model.VSKey
	// Flags are every flag the kernel reports (FlagHashed too); Timeout is the
	// persistence timeout in seconds.
	Scheduler string
	Flags     uint32
	Timeout   uint32
	Stats     Counters
	Reals     []TableReal
}

// TableReal is one real server of a TableVS.
type TableReal struct {
	RS            model.RSKey
	Weight        uint32
	Forward       string // Masq, Route, Tunnel, ...
	ActiveConns   uint32
	InactiveConns uint32
	Stats         Counters
}

// Counters are the kernel's cumulative counters and its rate estimates (per second) of a
// virtual or real server.
type Counters struct {
	Conns      uint64 `json:"conns"`
	PacketsIn  uint64 `json:"inPkts"`
	PacketsOut uint64 `json:"outPkts"`
	BytesIn    uint64 `json:"inBytes"`
	BytesOut   uint64 `json:"outBytes"`
	CPS        uint64 `json:"cps"`
	PPSIn      uint64 `json:"inPPS"`
	PPSOut     uint64 `json:"outPPS"`
	BPSIn      uint64 `json:"inBPS"`
	BPSOut     uint64 `json:"outBPS"`
}
