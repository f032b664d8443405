#!/usr/bin/env bash
# The guest side of make cluster (the payload's entry; nothing else boots it, so every other
# guest run is unchanged): turns the guest into the cluster's network and its nodes.
#   1. in the initramfs: copies the root into a tmpfs and moves that over / (what switch_root
#      does; runc cannot pivot_root out of an initramfs root), then runs itself again there;
#   2. in the tmpfs root, which stands for the network and not for a node: cgroup2 with its
#      controllers, the network card towards QEMU (10.0.2.15), the nodes' L2 segment (the
#      bridge kipvs-net, 172.18.0.0/24, routed and masqueraded towards QEMU), the CONNECT
#      proxy through which the API server reaches the kubelets and the pods, the agent, the
#      "outside" host on the segment, and each node of /payload/nodes.txt in namespaces of
#      its own (hack/cluster/node-init.sh, which runs its containerd and kubelet);
#   3. waits until the host's control listener says "done N", and exits N.
# The payload (cluster-host writes it): /payload/nodes.txt ("NAME IP ZONE" a line),
# /payload/nodes/NAME/{ca.crt,kubelet.crt,kubelet.key,kubelet.kubeconfig},
# /payload/images/*.tar (and make conformance's in /payload/images/conformance/),
# /payload/cluster-node, /payload/node-init; the binaries are in /usr/local/bin and the CNI
# plugins in /opt/cni/bin.
set -euo pipefail
ip=10.0.2.15
ctl=10.0.2.100
ctl_port=7000
start=${EPOCHREALTIME%.*}
log() { echo "net: [$(( ${EPOCHREALTIME%.*} - start ))s] $*"; }

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

# --- the tmpfs root: the network ---------------------------------------------------------
mount -t cgroup2 cgroup2 /sys/fs/cgroup
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
  echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control
done
# This script and the network's daemons (the CONNECT proxy, the agent) in /system.slice, each
# node in a cgroup of its own beside it: under contention each gets an equal share.
mkdir -p /sys/fs/cgroup/system.slice
echo $$ >/sys/fs/cgroup/system.slice/cgroup.procs
hostname kipvs-net
echo "nameserver 10.0.2.3" >/etc/resolv.conf
sysctl -qw net.ipv4.ip_forward=1
# Global to the kernel, so shared by every node: each kubelet and containerd watches files
# with inotify, and the defaults (128 instances) are too few for several nodes (kind asks the
# same of its hosts).
sysctl -qw fs.inotify.max_user_instances=1024 fs.inotify.max_user_watches=524288

modprobe virtio_pci
modprobe virtio_net
modprobe overlay || true
modprobe bridge
for ((i = 0; i < 100; i++)); do [[ -e /sys/class/net/eth0 ]] && break; sleep 0.05; done
ip addr add "$ip/24" dev eth0
ip link set eth0 up
ip route add default via 10.0.2.2

# The nodes' segment: one bridge, as a rack's switch. Nothing bridged is filtered
# (br_netfilter is not loaded). What the segment sends towards QEMU (the API server, the
# control listener) leaves masqueraded as 10.0.2.15, the one address QEMU's network knows.
ip link add kipvs-net type bridge
ip addr add 172.18.0.1/24 dev kipvs-net
ip link set kipvs-net up
iptables -t nat -A POSTROUTING -s 172.18.0.0/24 -o eth0 -j MASQUERADE

mkdir -p /var/log/nodes
/payload/cluster-node connect-proxy --listen "$ip:8132" >/var/log/connect-proxy.log 2>&1 &
/payload/cluster-node agent --listen "$ip:8133" >/var/log/agent.log 2>&1 &

# attach NETNS IP: a veth from the namespace's eth0 to the segment, IP/24 on it, routed
# through this namespace (172.18.0.1) towards everything beyond the segment.
attach() {
  local ns=$1 addr=$2 port=$3
  ip link add "$port" type veth peer name eth0 netns "$ns"
  ip link set "$port" master kipvs-net up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via 172.18.0.1
}

# "outside": another host on the nodes' segment, for the checks' requests from outside the
# cluster (NodePorts, externalTrafficPolicy Local).
ip netns add outside
attach outside 172.18.0.200 veth-outside

# The nodes: each in namespaces of its own (hack/cluster/node-init.sh). The process that
# starts a node joins the node's cgroup first, so that the cgroup namespace unshare makes is
# rooted there; once the node has made /system.slice, that process moves into it, leaving
# the node's root cgroup free to delegate its controllers.
i=0
while read -r name addr zone; do
  [[ -n $name ]] || continue
  # An interface name has at most 15 characters: the port of kipvs-node-N is veth-nN.
  ip netns add "$name"
  attach "$name" "$addr" "veth-n$((++i))"
  mkdir /sys/fs/cgroup/"$name"
  (
    echo "$BASHPID" >/sys/fs/cgroup/"$name"/cgroup.procs
    exec ip netns exec "$name" /usr/local/bin/unshare --mount --uts --ipc --pid --cgroup --fork \
      --mount-proc --propagation private /usr/bin/bash /payload/node-init "$name" "$addr" "$zone"
  ) </dev/null 2>&1 | tee /var/log/nodes/"$name".log &
done </payload/nodes.txt
while read -r name _; do
  for ((i = 0; i < 300; i++)); do [[ -d /sys/fs/cgroup/$name/system.slice ]] && break; sleep 0.1; done
  for pid in $(cat /sys/fs/cgroup/"$name"/cgroup.procs); do
    echo "$pid" >/sys/fs/cgroup/"$name"/system.slice/cgroup.procs
  done
done </payload/nodes.txt
log "nodes started: $(cut -d' ' -f1-3 /payload/nodes.txt | tr '\n' ';')"

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
  while read -r name _; do
    for f in /nodes/"$name"/var/log/{kubelet,containerd,agent}.log; do
      echo "--- $name: last lines of ${f#/nodes/"$name"}"
      tail -n 40 "$f" 2>/dev/null || true
    done
    ip -n "$name" addr; ip -n "$name" route
  done </payload/nodes.txt
  for f in /var/log/connect-proxy.log /var/log/agent.log; do
    echo "--- last lines of $f"
    tail -n 20 "$f"
  done
fi
exit "$rc"
