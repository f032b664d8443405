// Command paritydiff compares the kernel state kube-proxy's IPVS mode and kube-ipvs
// programmed for the same objects (make parity, test/parity/parity.sh). Each argument is a
// folder holding ipvs.txt (`ipvsadm -Sn`), addrs.txt (`ip -o addr show dev kube-ipvs0`)
// and sets.txt (`ipset save`) of one proxy's network namespace; it prints one line per
// difference after normalisation: "- ..." only kube-proxy has it, "+ ..." only kube-ipvs.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: paritydiff KUBE-PROXY-DIR KUBE-IPVS-DIR")
		os.Exit(2)
	}
	kp, err := readState(os.Args[1])
	if err == nil {
		var ki state
		if ki, err = readState(os.Args[2]); err == nil {
			for _, l := range diff(kp, ki) {
				fmt.Println(l)
			}
			return
		}
	}
	fmt.Fprintln(os.Stderr, "paritydiff:", err)
	os.Exit(1)
}

func readState(dir string) (state, error) {
	s := state{}
	for file, read := range map[string]func(io.Reader, state) error{
		"ipvs.txt": readIPVS, "addrs.txt": readAddrs, "sets.txt": readSets,
	} {
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		err = read(f, s)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
	}
	disjointLocal(s)
	return s, nil
}
