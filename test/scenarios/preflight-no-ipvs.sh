#!/usr/bin/env bash
# guest-append: kipvs.nopreload
#
# kube-ipvs preflight on a guest whose init loaded no kernel module (kipvs.nopreload):
#   1. --no-modprobe: exit 1, every needed module "missing" with its `modprobe` fix, the
#      probes that would make the kernel load modules skipped, and nothing loaded;
#   2. ip_vs blocked by an install line in /etc/modprobe.d: exit 1, the ip_vs row failed
#      with its fix, the verdict says why, -o json has "ipvsUsable": false;
#      The DaemonSet's init container, `run --init-only`, then exits 0 under mode auto
#      (the proxy will fall back to iptables) having set the iptables mode's sysctls and
#      the conntrack limits, and 1 under --mode=ipvs, as the proxy would;
#   3. unblocked: preflight loads every module itself and exits 0, leaving no probe
#      virtual server or dummy link behind.
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "=== $*"; }

# run_preflight WANT_RC ARGS...: runs kube-ipvs preflight, prints its output, sets $out,
# and fails unless it exited WANT_RC.
run_preflight() {
  local want=$1 rc
  shift
  set +e
  out=$(kube-ipvs preflight "$@" 2>&1)
  rc=$?
  set -e
  echo "\$ kube-ipvs preflight $*   (exit $rc)"
  echo "$out"
  [[ $rc == "$want" ]] || fail "kube-ipvs preflight $* exited $rc, want $want"
}

# row NAME: the table row of a check (required rows carry a " *" after the name).
row() {
  grep -E "^$1( \*)? " <<<"$out" || fail "no row '$1' in the table"
}

loaded() { grep -q "^$1 " /proc/modules; }

# json_field NAME FIELD: the value of FIELD in the check NAME of -o json output.
json_field() {
  awk -v name="\"name\": \"$1\"," -v field="\"$2\": " '
    index($0, name) { found = 1; next }
    found && index($0, field) { sub(/^[^:]*: "/, ""); sub(/",?$/, ""); print; exit }
  ' <<<"$out"
}

step "0. the guest preloaded nothing"
grep -qw kipvs.nopreload /proc/cmdline || fail "kipvs.nopreload is not on the kernel command line: $(cat /proc/cmdline)"
for m in ip_vs nf_conntrack ip_set dummy xt_set xt_ipvs; do
  ! loaded "$m" || fail "module $m is loaded although init preloaded nothing"
done

step "1. --no-modprobe on a bare guest"
run_preflight 1 --no-modprobe
for m in ip_vs ip_vs_rr nf_conntrack ip_set dummy xt_set xt_ipvs ip_set_hash_ipport ip_set_bitmap_port; do
  line=$(row "module $m")
  [[ $line =~ [[:space:]]missing[[:space:]] ]] || fail "module $m is not 'missing': $line"
  [[ $line == *"modprobe $m" ]] || fail "module $m does not end with the fix 'modprobe $m': $line"
done
for c in "ipvs netlink" "ipvs probe rr" "dummy link" "ipset netlink" "sysctl net.ipv4.vs.conntrack"; do
  line=$(row "$c")
  [[ $line =~ [[:space:]]skipped[[:space:]] ]] || fail "'$c' ran with --no-modprobe (it would load a module): $line"
done
grep -q "^IPVS mode: NOT usable (module ip_vs, module ip_vs_rr, module nf_conntrack, module ip_set, ipvs netlink, ipvs probe rr)" <<<"$out" ||
  fail "the verdict does not name the blocking checks"
for m in ip_vs ip_vs_rr nf_conntrack ip_set dummy xt_set xt_ipvs; do
  ! loaded "$m" || fail "--no-modprobe, yet module $m got loaded"
done

step "2. ip_vs blocked"
mkdir -p /etc/modprobe.d
false_bin=$(type -P false) || fail "no false binary on PATH"
echo "install ip_vs $false_bin" >/etc/modprobe.d/kipvs-block.conf
if modprobe ip_vs 2>/dev/null; then fail "the install line does not block ip_vs: modprobe ip_vs succeeded"; fi
if modprobe ip_vs_rr 2>/dev/null; then fail "the install line does not block ip_vs as a dependency of ip_vs_rr"; fi
! loaded ip_vs || fail "ip_vs got loaded despite the block"
echo "blocked: modprobe ip_vs and modprobe ip_vs_rr both fail, ip_vs is not loaded"

run_preflight 1
line=$(row "module ip_vs")
[[ $line =~ [[:space:]]failed[[:space:]] ]] || fail "the ip_vs row is not 'failed': $line"
[[ $line == *"modprobe failed"* ]] || fail "the ip_vs row does not say modprobe failed: $line"
[[ $line == *"then modprobe ip_vs" ]] || fail "the ip_vs row does not show its fix: $line"
line=$(row "ipvs netlink")
[[ $line =~ [[:space:]]failed[[:space:]] ]] || fail "the IPVS netlink family answered without ip_vs: $line"
grep -q "^IPVS mode: NOT usable (module ip_vs" <<<"$out" || fail "the verdict does not name module ip_vs"
! loaded ip_vs || fail "ip_vs got loaded despite the block (by preflight or the kernel)"

run_preflight 1 -o json
grep -qx '  "ipvsUsable": false,' <<<"$out" || fail "-o json does not say \"ipvsUsable\": false"
[[ $(json_field "module ip_vs" status) == failed ]] || fail "-o json: module ip_vs status is '$(json_field "module ip_vs" status)', want failed"
[[ $(json_field "module ip_vs" fix) == *"modprobe ip_vs"* ]] || fail "-o json: module ip_vs has no modprobe fix"
[[ $(json_field "module ip_set" status) == ok ]] || fail "-o json: module ip_set is not ok"

echo 0 >/proc/sys/net/ipv4/ip_forward
set +e
out=$(kube-ipvs run --init-only 2>&1)
rc=$?
set -e
echo "\$ kube-ipvs run --init-only   (exit $rc)"
echo "$out"
[[ $rc == 0 ]] || fail "run --init-only under mode auto exited $rc without IPVS, want 0 (the proxy falls back to iptables)"
grep -q "FALLING BACK TO THE IPTABLES PROXIER" <<<"$out" || fail "run --init-only did not say it falls back"
grep -q "mode=iptables" <<<"$out" || fail "run --init-only did not finish in the iptables mode"
[[ $(cat /proc/sys/net/ipv4/ip_forward) == 1 ]] || fail "run --init-only did not set net.ipv4.ip_forward in the fallback"
[[ $(cat /proc/sys/net/netfilter/nf_conntrack_max) -ge 131072 ]] || fail "run --init-only did not raise nf_conntrack_max in the fallback"
set +e
out=$(kube-ipvs run --init-only --mode=ipvs 2>&1)
rc=$?
set -e
echo "\$ kube-ipvs run --init-only --mode=ipvs   (exit $rc)"
[[ $rc == 1 ]] || fail "run --init-only --mode=ipvs exited $rc without IPVS, want 1: $out"
grep -q "IPVS cannot run on this node" <<<"$out" || fail "run --init-only --mode=ipvs does not say why: $out"
! loaded ip_vs || fail "ip_vs got loaded despite the block (by run --init-only)"

step "3. unblocked: preflight loads what is missing"
rm /etc/modprobe.d/kipvs-block.conf
run_preflight 0
line=$(row "module ip_vs")
[[ $line =~ [[:space:]]ok[[:space:]] && $line == *"loaded now by modprobe ip_vs"* ]] || fail "ip_vs was not loaded by preflight: $line"
for c in "ipvs netlink" "ipvs probe rr" "dummy link" "ipset netlink" "iptables" "sysctl net.ipv4.vs.conntrack"; do
  line=$(row "$c")
  [[ $line =~ [[:space:]]ok[[:space:]] ]] || fail "'$c' is not ok: $line"
done
[[ $(tail -n1 <<<"$out") == "IPVS mode: usable" ]] || fail "the verdict is not 'IPVS mode: usable'"
for m in ip_vs ip_vs_rr nf_conntrack ip_set dummy xt_set xt_ipvs ip_set_hash_ipport ip_set_hash_ipportip \
  ip_set_hash_ipportnet ip_set_hash_ip ip_set_hash_net ip_set_bitmap_port; do
  loaded "$m" || fail "module $m is not loaded after preflight"
done
if ipvsadm -Ln | grep -q 198.51.100.254; then fail "the probe virtual server is left over: $(ipvsadm -Ln)"; fi
if ip link show kipvs-probe0 >/dev/null 2>&1; then fail "the probe dummy link kipvs-probe0 is left over"; fi

run_preflight 0 --no-modprobe -o json
grep -qx '  "ipvsUsable": true,' <<<"$out" || fail "-o json does not say \"ipvsUsable\": true once everything is loaded"

echo "preflight-no-ipvs: all checks passed"
