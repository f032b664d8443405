// Command podspec prints what the kubelet would run for each container of
// deploy/daemonset.yaml, as bash assignments, so the guest's image proof
// (test/scenarios/image.sh) starts the image's processes with the manifest's own command,
// args, environment and mounts instead of a copy that could drift from it:
//
//	go run ./test/podspec --node NAME --files DIR > podspec.sh
//
// Per container (init0_*, init1_*, ..., then main0_*, ...): _name, _command (empty: the
// image's entrypoint), _args (empty: the image's cmd), _env (NAME=VALUE) and _mounts
// ("KIND|SOURCE|TARGET|ro or rw"; KIND hostPath with SOURCE the node's path, or configMap
// with SOURCE a folder under DIR holding the volume's files).
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	ds := flag.String("daemonset", "deploy/daemonset.yaml", "the DaemonSet manifest")
	cm := flag.String("configmap", "deploy/configmap.yaml", "the ConfigMap manifest its configMap volumes and env refer to")
	node := flag.String("node", "", "the node's name (the downward API's spec.nodeName)")
	files := flag.String("files", "", "folder to write configMap volumes' files into")
	flag.Parse()
	if *node == "" || *files == "" {
		fmt.Fprintln(os.Stderr, "usage: podspec --node NAME --files DIR [--daemonset FILE] [--configmap FILE]")
		os.Exit(2)
	}
	pod, err := load(*ds, *cm)
	if err == nil {
		err = pod.write(os.Stdout, *node, *files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "podspec:", err)
		os.Exit(1)
	}
}
