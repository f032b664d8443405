# Helpers for scenario scripts in the guest (source it): pods as network namespaces.
# shellcheck shell=bash

# mkpod NAME IP: a network namespace joined to the node by a veth pair, routed the way Calico
# does it: the pod's /32 on its eth0, the gateway 169.254.1.1 on the node's end of the veth.
mkpod() {
  local name=$1 ip=$2
  command ip netns add "$name"
  command ip link add "v$name" type veth peer name eth0 netns "$name"
  command ip addr add 169.254.1.1/32 dev "v$name"
  command ip link set "v$name" up
  command ip route add "$ip/32" dev "v$name"
  command ip -n "$name" link set lo up
  command ip -n "$name" addr add "$ip/32" dev eth0
  command ip -n "$name" link set eth0 up
  command ip -n "$name" route add 169.254.1.1 dev eth0 scope link
  command ip -n "$name" route add default via 169.254.1.1 dev eth0
}

# inpod POD CMD...: runs a command inside a pod.
inpod() {
  local pod=$1
  shift
  command ip netns exec "$pod" "$@"
}

# wait_for SECONDS CMD...: polls CMD every 0.2 s until it succeeds; fails after SECONDS.
wait_for() {
  local limit=$1 deadline
  shift
  deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "timed out after ${limit}s waiting for: $*" >&2
      return 1
    fi
    sleep 0.2
  done
}
