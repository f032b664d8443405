#!/usr/bin/env bash
# The guest side of make cluster (the payload's entry; nothing else boots it, so every other
# guest run is unchanged): turns the guest into the cluster's one node.
#   1. in the initramfs: copies the root into a tmpfs and moves that over / (what switch_root
#      does; runc cannot pivot_root out of an initramfs root), then runs itself again there;
#   2. in the tmpfs root: cgroup2 with its controllers, the network card, containerd with the
#      images of /payload/images, kubelet, the CNI config once the Node has its podCIDR, and
#      the CONNECT proxy through which the API server reaches the kubelet and the pods;
#   3. waits until the host's control listener says "done N", and exits N.
# The payload (cluster-host writes it): /payload/node/{ca.crt,kubelet.crt,kubelet.key,
# kubelet.kubeconfig}, /payload/images/*.tar (and make conformance's in
# /payload/images/conformance/), /payload/cluster-node; the binaries are in
# /usr/local/bin and the CNI plugins in /opt/cni/bin.
set -euo pipefail
node=kipvs-node
ip=10.0.2.15
api=https://10.0.2.100:6443
ctl=10.0.2.100
ctl_port=7000
start=${EPOCHREALTIME%.*}
log() { echo "node: [$(( ${EPOCHREALTIME%.*} - start ))s] $*"; }

if [[ -z ${KIPVS_NODE_ROOT:-} ]]; then
  # /init runs this as its child, so the switch is a mount move and a chroot (not
  # switch_root, which only PID 1 may run); /init keeps the initramfs, its /dev and its
  # serial port, and reports this script's exit status as usual.
  mkdir -p /newroot
  mount -t tmpfs -o mode=0755 tmpfs /newroot
  for e in /*; do
    case $e in /proc | /sys | /dev | /run | /tmp | /newroot) continue ;; esac
    cp -a "$e" /newroot/
  done
  mkdir -p /newroot/{proc,sys,dev,run,tmp}
  mount -t proc proc /newroot/proc
  mount -t sysfs sysfs /newroot/sys
  mount --rbind /dev /newroot/dev
  mount -t tmpfs -o mode=0755 tmpfs /newroot/run
  mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
  log "root copied into a tmpfs ($(du -sm /newroot | cut -f1) MiB)"
  cd /newroot
  mount --move . /
  export KIPVS_NODE_ROOT=1 START=$start
  exec chroot . /usr/bin/bash /payload/entry
fi
start=${START:-$start}

# --- the tmpfs root -----------------------------------------------------------------------
mount --make-rshared /
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# kubelet puts pods in cgroups of their own under /kubepods: every controller the kernel has
# must be enabled for the root's children (cpu, cpuset, io, memory, pids, hugetlb, ...).
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
  echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control
done
log "cgroup2: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
# The node's daemons (containerd and the shims and runc it starts, the kubelet, the CNI
# plugins, the test agents) go into /system.slice, as systemd puts them on a real node, so
# that under load they share the CPU with /kubepods as two cgroups of about equal weight.
# Left in the root cgroup, each busy daemon thread would weigh as much as all the Pods
# together: tearing down Pods starved every Pod of the node for seconds (docs/cluster.md).
mkdir -p /sys/fs/cgroup/system.slice
echo $$ >/sys/fs/cgroup/system.slice/cgroup.procs
hostname "$node"
echo "127.0.0.1 localhost $node" >/etc/hosts
# No DNS server is reachable (the network is restricted); kubelet wants a file to read.
echo "nameserver 10.0.2.3" >/etc/resolv.conf
sysctl -qw net.ipv4.ip_forward=1

modprobe virtio_pci
modprobe virtio_net
modprobe overlay || true
for ((i = 0; i < 100; i++)); do [[ -e /sys/class/net/eth0 ]] && break; sleep 0.05; done
ip addr add "$ip/24" dev eth0
ip link set eth0 up
ip route add default via 10.0.2.2

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
# imported in the background, so the kubelet starts about 9 s sooner.
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
mkdir -p /etc/kubernetes /var/lib/kubelet /var/log/pods
cp /payload/node/* /etc/kubernetes/
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
kubelet --config=/etc/kubernetes/kubelet.yaml --kubeconfig=/etc/kubernetes/kubelet.kubeconfig \
  --hostname-override="$node" --node-ip="$ip" --v=1 >/var/log/kubelet.log 2>&1 &
log "kubelet $(kubelet --version | awk '{print $2}') started"

/payload/cluster-node connect-proxy --listen "$ip:8132" >/var/log/connect-proxy.log 2>&1 &
/payload/cluster-node agent --listen "$ip:8133" >/var/log/agent.log 2>&1 &

# "outside": a network namespace standing for another host on the node's network, for the
# checks' NodePort requests from outside the node (192.168.200.2, routed through the node).
ip netns add outside
ip link add veth-outside type veth peer name eth0 netns outside
ip addr add 192.168.200.1/24 dev veth-outside
ip link set veth-outside up
ip -n outside addr add 192.168.200.2/24 dev eth0
ip -n outside link set lo up
ip -n outside link set eth0 up
ip -n outside route add default via 192.168.200.1

cidr=$(/payload/cluster-node pod-cidr --server "$api" --ca /etc/kubernetes/ca.crt \
  --cert /etc/kubernetes/kubelet.crt --key /etc/kubernetes/kubelet.key --node "$node")
# ptp gives each pod a veth pair and a /32 route to it on the node, with no bridge, the way
# kindnet does: routed, so the node's own routing (and later kube-ipvs) sees every pod
# address, and no br_netfilter is needed. host-local hands out the node's podCIDR;
# portmap serves hostPorts. (containerd adds the loopback plugin itself.) ipMasq masquerades
# what pods send outside the podCIDR, as kindnet does: the API server's address (the
# `kubernetes` Service's endpoint) is QEMU's, which knows no route back to a pod.
cat >/etc/cni/net.d/10-kipvs.conflist <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kipvs",
  "plugins": [
    {"type": "ptp", "ipMasq": true, "mtu": 1500,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
log "CNI: ptp + host-local on podCIDR $cidr"

# --- wait for the host --------------------------------------------------------------------
while :; do
  reply=$(echo status | nc "$ctl" "$ctl_port" 2>/dev/null || true)
  case $reply in
  done*) break ;;
  esac
  sleep 2
done
rc=${reply#done }
log "host says $reply"
if [[ $rc != 0 ]]; then
  for f in /var/log/kubelet.log /var/log/containerd.log /var/log/connect-proxy.log /var/log/agent.log; do
    echo "--- last lines of $f"
    tail -n 40 "$f"
  done
  ip addr; ip route
fi
exit "$rc"
