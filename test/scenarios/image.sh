#!/usr/bin/env bash
# guest-prepare: hack/image/guest-payload.sh
#
# The DaemonSet's image (`make image`), run the way the kubelet runs deploy/daemonset.yaml:
# the image's linux/amd64 root file system is unpacked in /payload/prepared/rootfs, and each
# container runs there in a mount namespace of its own (chroot, /proc, /sys and /dev of the
# node, the manifest's volume mounts), with the host's network, the manifest's command, args
# and environment (read from the manifest by test/podspec, never copied here) and the image's
# entrypoint and PATH. On the demo's manifests (examples/, copied into the container's root
# in place of an API server):
#   1. the init container (`run --init-only`, privileged) succeeds, and `kube-ipvs preflight`
#      from the image exits 0; the proxy container, not privileged, then runs with /proc/sys
#      and /sys read-only, as its runtime mounts them (its capabilities are checked by
#      test/e2e TestInitOnlyThenLeastPrivilege: this guest has no tool to bound them);
#   2. with the node's rules on iptables-legacy (a foreign rule in each family), the proxy
#      writes its KIPVS chains with legacy in both families and nothing with nft; the demo's
#      traffic checks pass (ClusterIP rr over three backends, sh + ClientIP affinity,
#      NodePort, UDP); the image's ipvsadm -Ln shows the table;
#   3. with the node's rules on nft (more rules there than in legacy), a fresh proxy writes
#      nft in both families and nothing with legacy, and traffic flows again.
set -euo pipefail
source ./lib/pods.sh

prep=/payload/prepared
root=$prep/rootfs
source "$prep/image-config.sh"
source "$prep/podspec.sh"
bb=/opt/busybox/bin

fail() {
  echo "FAIL: $*" >&2
  [[ -f /tmp/kipvs.log ]] && { echo "--- kube-ipvs log (from the image):" >&2; tail -n 40 /tmp/kipvs.log >&2; }
  exit 1
}
step() { echo "=== $*"; }

# in_container C CMD...: runs CMD in container C's view of the image (C is a podspec.sh
# prefix: init0, main0): a private mount namespace holding the image's root with the node's
# /proc, /sys, /dev and C's volume mounts, the image's environment overlaid with C's, chroot.
# A container that is not privileged gets /proc/sys and /sys read-only, as from its runtime.
in_container() {
  local c=$1 m kind src dst mode setup=""
  shift
  local -n mounts="${c}_mounts" envs="${c}_env" privileged="${c}_privileged"
  for m in /proc /sys /dev; do
    setup+="$bb/mount -o rbind $m $root$m && "
  done
  if [[ $privileged != 1 ]]; then
    setup+="$bb/mount -o bind $root/proc/sys $root/proc/sys && $bb/mount -o remount,bind,ro $root/proc/sys && "
    setup+="$bb/mount -o remount,bind,ro $root/sys && "
  fi
  for m in "${mounts[@]}"; do
    IFS='|' read -r kind src dst mode <<<"$m"
    case $kind in
    configMap) src=$prep/podfiles/$src ;;
    hostPath) [[ -e $src ]] || : >"$src" ;; # FileOrCreate (xtables.lock); the rest exist
    *) fail "podspec mount kind $kind" ;;
    esac
    if [[ -d $src ]]; then mkdir -p "$root$dst"; else touch "$root$dst"; fi
    # The image's /lib is a link to usr/lib: mount on the resolved path, which /proc/mounts shows.
    dst=$(realpath "$root$dst")
    setup+="$bb/mount -o bind $(printf %q "$src") $(printf %q "$dst") && "
    [[ $mode == ro ]] && setup+="$bb/mount -o remount,bind,ro $(printf %q "$dst") && "
  done
  local argv=(env -i "${image_env[@]}" "${envs[@]}" "$bb/unshare" -m --propagation private /usr/bin/bash -c
    "$setup exec $bb/chroot $(printf %q "$root") \"\$@\"" container "$@")
  # In a subshell (a background job, a command substitution) the container's process takes
  # the subshell's pid, as a container's does.
  if ((BASHPID != $$)); then exec "${argv[@]}"; fi
  "${argv[@]}"
}

# run_container C [ARGS...]: C's process as the kubelet starts it: the manifest's command
# (then its args), or else the image's entrypoint with the manifest's args or the image's
# cmd; ARGS are appended.
run_container() {
  local c=$1
  shift
  local -n cmd="${c}_command" args="${c}_args"
  local argv=()
  if ((${#cmd[@]} > 0)); then
    argv=("${cmd[@]}" "${args[@]}")
  elif ((${#args[@]} > 0)); then
    argv=("${image_entrypoint[@]}" "${args[@]}")
  else
    argv=("${image_entrypoint[@]}" "${image_cmd[@]}")
  fi
  in_container "$c" "${argv[@]}" "$@"
}

[[ $init0_name == init && $init0_privileged == 1 && $main0_name == kube-ipvs && $main0_privileged == 0 ]] ||
  fail "deploy/daemonset.yaml's containers are $init0_name (privileged: $init0_privileged) and $main0_name (privileged: $main0_privileged), want init (privileged) and kube-ipvs (not)"

step "the image: $(wc -l <"$root/usr/share/kube-ipvs/packages.txt") Debian packages, entrypoint ${image_entrypoint[*]}"
grep -E '^(iptables|ipset|ipvsadm|kmod|conntrack|iproute2|netbase) ' "$root/usr/share/kube-ipvs/packages.txt"
in_container main0 kube-ipvs version || fail "kube-ipvs version from the image failed"

step "init container: deploy/daemonset.yaml's run --init-only"
echo 0 >/proc/sys/net/ipv4/ip_forward # the init container must set it
run_container init0 || fail "the init container exited $?"
[[ $(cat /proc/sys/net/ipv4/ip_forward) == 1 ]] || fail "run --init-only did not set net.ipv4.ip_forward"
[[ $(cat /proc/sys/net/netfilter/nf_conntrack_max) -ge 131072 ]] || fail "run --init-only did not raise nf_conntrack_max to conntrackMin"
step "the proxy container's /proc/sys is read-only"
! in_container main0 sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward' 2>/dev/null || fail "the proxy container can write /proc/sys"
step "kube-ipvs preflight from the image"
in_container init0 kube-ipvs preflight || fail "kube-ipvs preflight from the image exited $?"

ip link add node0 type dummy
ip addr add 203.0.113.10/24 dev node0
ip link set node0 up
for i in 1 2 3; do
  mkpod "web-$i" "10.244.1.1$i"
  inpod "web-$i" kipvs-echo serve --name "web-$i" --tcp 8080 --udp 5353 &
done
for c in 1 2 3 4; do mkpod "client-$c" "10.244.2.$c"; done
mkdir -p "$root/var/lib/kube-ipvs-demo"
cp "$prep"/manifests/*.yaml "$root/var/lib/kube-ipvs-demo/"

proxy=""
stop_proxy() {
  [[ -n $proxy ]] || return 0
  kill "$proxy" 2>/dev/null || true
  wait "$proxy" 2>/dev/null || true
  proxy=""
}
trap stop_proxy EXIT

# start_proxy: the DaemonSet's kube-ipvs container, on the demo's manifests.
start_proxy() {
  run_container main0 --manifests=/var/lib/kube-ipvs-demo >/tmp/kipvs.log 2>&1 &
  proxy=$!
  wait_for 60 sh -c 'ipvsadm -Ln | grep -q "10.96.0.53:53"' || fail "no virtual servers after 60 s"
  # Its root is the image's (which has packages.txt and no /payload) and so is its binary.
  [[ -f /proc/$proxy/root/usr/share/kube-ipvs/packages.txt && ! -e /proc/$proxy/root/payload ]] ||
    fail "kube-ipvs (pid $proxy) does not run in the image's root"
  cmp -s "/proc/$proxy/exe" "$root/usr/local/bin/kube-ipvs" || fail "pid $proxy is not the image's kube-ipvs"
}

# kipvs_chains SAVE-TOOL: how many KIPVS chains that tool's dump shows.
kipvs_chains() { "$1" 2>/dev/null | grep -c '^:KIPVS' || true; }

# expect_backend WANT OTHER: KIPVS chains with WANT's tools in both families, none with OTHER's.
expect_backend() {
  local want=$1 other=$2 f
  for f in iptables ip6tables; do
    wait_for 30 sh -c "$f-$want-save | grep -q '^:KIPVS'" || fail "no KIPVS chain in $f-$want-save"
    echo "$f-$want-save: $(kipvs_chains "$f-$want-save") KIPVS chains"
    [[ $(kipvs_chains "$f-$other-save") == 0 ]] || fail "KIPVS chains in $f-$other-save too"
  done
}

# check_traffic: the demo's checks, with what they show asserted.
check_traffic() {
  local out c n
  wait_for 20 inpod client-1 kipvs-echo ask 10.96.0.10:80 || fail "web 10.96.0.10:80 unreachable"
  out=$(inpod client-1 kipvs-echo ask --count 30 --summary 10.96.0.10:80) || fail "web: $out"
  echo "$out"
  for n in 1 2 3; do
    grep -q "^web-$n  *10$" <<<"$out" || fail "web (rr): web-$n did not answer 10 of 30"
  done
  for c in 1 2 3 4; do
    out=$(inpod "client-$c" kipvs-echo ask --count 10 --summary 10.96.0.20:80) || fail "sticky: $out"
    [[ $(wc -l <<<"$out") == 1 && $out == *" 10" ]] || fail "sticky (ClientIP): client-$c saw $out"
  done
  echo "sticky: every client kept one backend"
  out=$(inpod client-2 kipvs-echo ask --count 20 --summary 203.0.113.10:30080) || fail "shop NodePort: $out"
  ! grep -q '^web-1 ' <<<"$out" || fail "shop NodePort answered from web-1, not an endpoint: $out"
  echo "shop NodePort: $(paste -sd ' ' <<<"$out")"
  out=$(inpod client-3 kipvs-echo ask --udp --count 30 --summary 10.96.0.53:53) || fail "dns UDP: $out"
  [[ $(wc -l <<<"$out") == 3 ]] || fail "dns (UDP rr): want three backends, got $out"
  echo "dns UDP: $(paste -sd ' ' <<<"$out")"
}

# fresh_node: what a proxy left is gone (every table of legacy and nft in both families
# emptied, its ipsets, virtual servers and kube-ipvs0), so the next start detects afresh and
# programs everything itself.
fresh_node() {
  local f b
  for f in iptables ip6tables; do
    for b in legacy nft; do
      "$f-$b-save" | awk '/^\*/ {print; print "COMMIT"}' | "$f-$b-restore" || fail "$f-$b: cannot clear the tables"
    done
  done
  ipset destroy || fail "ipset destroy"
  ipvsadm -C
  ip link del kube-ipvs0 2>/dev/null || true
}

# seed BACKEND N: N foreign rules in each family, as a node whose other components use BACKEND.
seed() {
  local b=$1 n=$2 f i
  for f in iptables ip6tables; do
    "$f-$b" -N NODE-FOREIGN
    for ((i = 0; i < n; i++)); do "$f-$b" -A INPUT -j NODE-FOREIGN; done
  done
}

step "node on iptables-legacy: the proxy from the image writes legacy"
fresh_node
seed legacy 1
start_proxy
expect_backend legacy nft
check_traffic
step "ipvsadm -Ln from the image"
out=$(in_container main0 ipvsadm -Ln) || fail "ipvsadm -Ln from the image failed"
echo "$out"
for vs in "TCP  10.96.0.10:80 rr" "TCP  10.96.0.20:80 sh" "TCP  203.0.113.10:30080 lc" "UDP  10.96.0.53:53 rr"; do
  grep -q "$vs" <<<"$out" || fail "ipvsadm -Ln from the image lacks $vs"
done
stop_proxy

step "node on nft: a fresh proxy from the image writes nft"
fresh_node
seed legacy 1
seed nft 2
start_proxy
expect_backend nft legacy
check_traffic
stop_proxy
echo "PASS ($SECONDS s in the guest): the image runs the DaemonSet's containers: run --init-only, the proxy with /proc/sys read-only, both backends, the demo's traffic"
