#!/usr/bin/env bash
# One node of make cluster's cluster, run by hack/cluster/node.sh as the first process of the
# node's own namespaces (mount, PID, UTS, IPC, cgroup, and the network namespace NAME), the way
# kind's nodes are containers:
#
#   node-init NAME IP ZONE
#
# It gives the node its own file system view (/etc, /var, /run, /tmp and /dev/shm of its own;
# the other nodes' folders and keys hidden), its own cgroup tree (/system.slice for its
# daemons beside the kubelet's /kubepods), then starts containerd with the images of
# /payload/images, the kubelet (Node NAME, InternalIP IP, label topology.kubernetes.io/zone
# ZONE), the node agent on IP:8133, and writes the CNI config once the Node has its podCIDR.
# The routes to the other nodes' podCIDRs are added by cluster-host through the agent once
# every Node has one. It then waits: the node lives as long as this process (PID 1 of its PID
# namespace) does.
set -euo pipefail
node=${1:?usage: node-init NAME IP ZONE}
ip=${2:?usage: node-init NAME IP ZONE}
zone=${3:?usage: node-init NAME IP ZONE}
api=https://10.0.2.100:6443
cluster_cidr=10.244.0.0/16
start=${EPOCHREALTIME%.*}
log() { echo "$node: [$(( ${EPOCHREALTIME%.*} - start ))s] $*"; }

# --- the node's own file system view ------------------------------------------------------
# unshare made every mount private to this namespace: nothing mounted here reaches the
# network's (the guest's root) or another node's view. Its own folders live under
# /nodes/NAME on the guest's root tmpfs, so the guest can print this node's logs when a
# run fails; /nodes is then hidden, with every other node's folder.
own=/nodes/$node
mkdir -p "$own/var/lib" "$own/var/log" "$own/etc"
ln -sfn ../run "$own/var/run"
cp -a /etc/. "$own/etc/"
mount --bind "$own/etc" /etc
mount --bind "$own/var" /var
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mkdir -p /etc/kubernetes
cp /payload/nodes/"$node"/* /etc/kubernetes/
mount -t tmpfs -o mode=0755 tmpfs /nodes
mount -t tmpfs -o mode=0755 tmpfs /payload/nodes
# containerd and the kubelet need shared mount propagation inside the node (volumes, and
# the kubelet's check of /var/lib/kubelet).
mount --make-rshared /

# --- the node's cgroup tree ---------------------------------------------------------------
# The cgroup namespace's root is this node's cgroup (/NAME in the guest); mounted here, it is
# the node's /sys/fs/cgroup. The node's daemons go into /system.slice, as systemd places them
# on a real node, beside the kubelet's /kubepods (docs/cluster.md, "The node's CPU").
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /sys/fs/cgroup/system.slice
echo $$ >/sys/fs/cgroup/system.slice/cgroup.procs
# The root may enable controllers for its children only once no process is left in it: the
# guest moves the process that started this one (unshare, outside this PID namespace) into
# /system.slice too, soon after it appears.
controllers=$(sed 's/\([^ ]*\)/+\1/g' /sys/fs/cgroup/cgroup.controllers)
for ((i = 0; ; i++)); do
  echo "$controllers" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null && break
  ((i < 300)) || { log "cannot enable the cgroup controllers: $(cat /sys/fs/cgroup/cgroup.procs | tr '\n' ' ')"; exit 1; }
  sleep 0.1
done

hostname "$node"
echo "127.0.0.1 localhost $node" >/etc/hosts
echo "$node" >/etc/hostname
# No DNS server is reachable (the network is restricted); kubelet wants a file to read.
echo "nameserver 10.0.2.3" >/etc/resolv.conf
ip link set lo up
sysctl -qw net.ipv4.ip_forward=1
log "namespaces ready: eth0 $ip, zone $zone, cgroup $(cat /proc/self/cgroup)"

# --- containerd ---------------------------------------------------------------------------
snapshotter=native
mkdir -p /tmp/ovl/{lower,upper,work,merged}
if mount -t overlay overlay -o lowerdir=/tmp/ovl/lower,upperdir=/tmp/ovl/upper,workdir=/tmp/ovl/work /tmp/ovl/merged 2>/dev/null; then
  umount /tmp/ovl/merged
  snapshotter=overlayfs
fi
rm -rf /tmp/ovl
mkdir -p /etc/containerd /var/lib/containerd /run/containerd /etc/cni/net.d /var/log
cat >/etc/containerd/config.toml <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "$snapshotter"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "registry.k8s.io/pause:3.10.1"
[plugins.'io.containerd.cri.v1.runtime']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/local/bin/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
EOF
containerd --config /etc/containerd/config.toml >/var/log/containerd.log 2>&1 &
for ((i = 0; i < 600; i++)); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
ctr version >/dev/null || { tail -n 30 /var/log/containerd.log; exit 1; }
log "containerd $(containerd --version | awk '{print $3}') up (snapshotter $snapshotter)"
# The rolling update's target (kube-ipvs-cluster-next.tar) is needed minutes later: it is
# imported in the background, so the kubelet starts sooner.
import_image() { ctr -n k8s.io images import --snapshotter "$snapshotter" "$1" >/dev/null; }
for t in /payload/images/*.tar; do
  [[ $t == */kube-ipvs-cluster-next.tar ]] || import_image "$t"
done
log "images: $(ctr -n k8s.io images ls -q | grep -v '^sha256:' | tr '\n' ' ')"
if [[ -f /payload/images/kube-ipvs-cluster-next.tar ]]; then
  (import_image /payload/images/kube-ipvs-cluster-next.tar && log "image kube-ipvs:cluster-next imported") &
fi
# make conformance's images (hack/conformance/build.sh's), also in the background: the suite
# starts after the proxy and CoreDNS are Ready, and cluster-host waits for these first.
if compgen -G "/payload/images/conformance/*.tar" >/dev/null; then
  (
    for t in /payload/images/conformance/*.tar; do import_image "$t"; done
    log "conformance images imported: $(ls /payload/images/conformance | tr '\n' ' ')"
  ) &
fi

# --- kubelet ------------------------------------------------------------------------------
mkdir -p /var/lib/kubelet /var/log/pods
cat >/etc/kubernetes/kubelet.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: /etc/kubernetes/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# The root is a tmpfs: no eviction for disk, and no ephemeral-storage accounting.
localStorageCapacityIsolation: false
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
EOF
# The zone label is one the kubelet may set on its own Node (NodeRestriction allows the
# topology.kubernetes.io labels), as cloud nodes get it.
kubelet --config=/etc/kubernetes/kubelet.yaml --kubeconfig=/etc/kubernetes/kubelet.kubeconfig \
  --hostname-override="$node" --node-ip="$ip" --node-labels="topology.kubernetes.io/zone=$zone" \
  --v=1 >/var/log/kubelet.log 2>&1 &
log "kubelet $(kubelet --version | awk '{print $2}') started"

/payload/cluster-node agent --listen "$ip:8133" >/var/log/agent.log 2>&1 &

cidr=$(/payload/cluster-node pod-cidr --server "$api" --ca /etc/kubernetes/ca.crt \
  --cert /etc/kubernetes/kubelet.crt --key /etc/kubernetes/kubelet.key --node "$node")
# ptp gives each pod a veth pair and a /32 route to it on the node, with no bridge, the way
# kindnet does: routed, so the node's own routing (and kube-ipvs) sees every pod address,
# and no br_netfilter is needed. host-local hands out the node's podCIDR; portmap serves
# hostPorts. (containerd adds the loopback plugin itself.) Other nodes' podCIDRs are routed
# through those nodes (cluster-host adds the routes).
cat >/etc/cni/net.d/10-kipvs.conflist <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kipvs",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
# What pods send out of the pod network is masqueraded to the node's address, as kindnet's
# masquerade agent does: the API server's address (the `kubernetes` Service's endpoint) is
# QEMU's, which knows no route back to a pod. Pod to pod, on this node or another, keeps the
# pod's address (ptp's own ipMasq would masquerade everything outside this node's podCIDR).
# The chain's name is the network's, not kube-ipvs' (KIPVS-*) nor kube-proxy's (KUBE-*): each
# proxy removes chains of its own prefix that it did not make.
iptables -t nat -N POD-NET-MASQ
iptables -t nat -A POD-NET-MASQ -d "$cluster_cidr" -j RETURN
iptables -t nat -A POD-NET-MASQ -m addrtype --dst-type LOCAL -j RETURN
iptables -t nat -A POD-NET-MASQ -j MASQUERADE
iptables -t nat -A POSTROUTING -s "$cidr" -m comment --comment "kipvs: pod traffic leaving the pod network" -j POD-NET-MASQ
log "CNI: ptp + host-local on podCIDR $cidr"

# The node lives until the guest stops.
while :; do sleep 3600; done
