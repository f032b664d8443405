# Helpers of migration.sh (sourced): the node and its pods as network namespaces, held
# connections, traffic counts, and the kernel state the steps are checked against. Every
# command runs in the node namespace "node" unless it names a pod.
out=/tmp/migration
node_ips=(192.0.2.10/24 2001:db8::10/64)
save_tools=(iptables-legacy-save ip6tables-legacy-save iptables-nft-save ip6tables-nft-save)

fail() {
  echo "FAIL: $*" >&2
  for f in "$out"/*.log; do [[ -f $f ]] && { echo "--- $f (last 40 lines)" >&2; tail -n 40 "$f" >&2; }; done
  exit 1
}

# in_node CMD...: CMD in the node namespace.
in_node() { ip netns exec node "$@"; }

# make_node: the node namespace: loopback, and eth0 (a dummy) with the node's addresses and
# default routes, as on a real node.
make_node() {
  ip netns add node
  ip -n node link set lo up
  ip -n node link add eth0 type dummy
  ip -n node addr add "${node_ips[0]}" dev eth0
  ip -n node addr add "${node_ips[1]}" dev eth0 nodad
  ip -n node link set eth0 up
  ip -n node route add default dev eth0
  ip -n node -6 route add default dev eth0
  in_node sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
}

# make_pod NAME IP: a pod on this node, routed as Calico does it: its /32 on eth0, the
# gateway 169.254.1.1 on the node's end of the veth (v-NAME).
make_pod() {
  ip netns add "$1"
  ip -n node link add "v-$1" type veth peer name eth0 netns "$1"
  ip -n node addr add 169.254.1.1/32 dev "v-$1"
  ip -n node link set "v-$1" up
  ip -n node route add "$2/32" dev "v-$1"
  ip -n "$1" link set lo up
  ip -n "$1" addr add "$2/32" dev eth0
  ip -n "$1" link set eth0 up
  ip -n "$1" route add 169.254.1.1 dev eth0 scope link
  ip -n "$1" route add default via 169.254.1.1 dev eth0
}

# wait_for SECONDS WHAT CMD...: polls CMD every 0.2 s until it succeeds.
wait_for() {
  local deadline=$((SECONDS + $1)) limit=$1 what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "no $what within $limit s"
    sleep 0.2
  done
}

# hold ID ADDR PORT: opens a TCP connection from the client pod to ADDR:PORT and keeps it
# open in the background. The connection's process reads a line from the fifo
# $out/held-ID.in for every exchange, sends it, and writes the server's answer to
# held-ID.out; the script keeps both fifos open on fds 10+2*ID and 11+2*ID.
hold() {
  local id=$1 w=$((10 + 2 * $1)) r=$((11 + 2 * $1))
  mkfifo "$out/held-$id.in" "$out/held-$id.out"
  ip netns exec client bash -c '
    exec 3<>"/dev/tcp/$0/$1" || exit 1
    while IFS= read -r -t 10 answer <&3; do
      echo "$answer"
      IFS= read -r line || exit 0
      echo "$line" >&3
    done
    echo "connection lost" >&2' "$2" "$3" <"$out/held-$id.in" >"$out/held-$id.out" 2>"$out/held-$id.err" &
  eval "exec $w>$(printf %q "$out/held-$id.in") $r<$(printf %q "$out/held-$id.out")"
  local first
  IFS= read -r -t 10 first <&"$r" || fail "held connection $id to $2:$3 did not open: $(cat "$out/held-$id.err")"
  echo "$first" >"$out/held-$id.backend"
  echo "held connection $id to $2:$3 answered by $first"
}

# ask_held ID: one request and answer over held connection ID; prints the answer, or fails
# (status 1) when the connection is gone.
ask_held() {
  local w=$((10 + 2 * $1)) r=$((11 + 2 * $1)) answer
  echo again >&"$w" 2>/dev/null || return 1
  IFS= read -r -t 10 answer <&"$r" || return 1
  echo "$answer"
}

# exchange ID WHEN: ask_held, and the answer must come from the backend that answered when
# the connection opened (it is the same connection).
exchange() {
  local answer want
  want=$(cat "$out/held-$1.backend")
  answer=$(ask_held "$1") || fail "held connection $1 did not answer $2: $(cat "$out/held-$1.err")"
  [[ $answer == "$want" ]] || fail "held connection $1 answered by $answer, not $want, $2"
  echo "held connection $1 still answered by $want $2"
}

# landings ADDR:PORT N: N new connections from the client pod; prints "b1=X b2=Y failed=Z".
landings() {
  local counts
  counts=$(ip netns exec client kipvs-echo ask --count "$2" --timeout 3s --summary "$1" 2>/dev/null) || true
  awk '{c[$1]=$2} END {printf "b1=%d b2=%d failed=%d\n", c["b1"], c["b2"], c["(failed)"]}' <<<"$counts"
}

# balanced ADDR:PORT N MIN WHO: N new connections all succeed and each backend gets at
# least MIN of them.
balanced() {
  local got b1 b2 failed
  got=$(landings "$1" "$2")
  read -r b1 b2 failed <<<"$(sed 's/[a-z0-9]*=//g' <<<"$got")"
  echo "$4: $2 new connections to $1 landed $got"
  ((failed == 0 && b1 >= $3 && b2 >= $3)) || fail "$4: new connections to $1 do not balance: $got (each backend needs $3)"
}

# rules_matching REGEX: the lines of every family's and backend's iptables-save that match.
rules_matching() {
  local tool
  for tool in "${save_tools[@]}"; do
    in_node "$tool" 2>/dev/null | grep -E "$1" | sed "s|^|$tool: |"
  done
  return 0
}

# sets_matching REGEX: the node's ipset names that match.
sets_matching() { in_node ipset list -n | grep -E "$1" || true; }

# metric NAME LABEL: the sum of kube-ipvs' metric NAME over its series that have LABEL (say
# subsystem="ipvs"), read from its metrics address in the node namespace.
metric() {
  in_node bash -c 'exec 3<>/dev/tcp/127.0.0.1/10249 && printf "GET /metrics HTTP/1.0\r\n\r\n" >&3 && cat <&3' |
    awk -v m="$1{" -v l="$2" 'index($0, m) == 1 && index($0, l) {s += $NF} END {print s + 0}'
}

# stop PID NAME: SIGTERM, as the kubelet ends a Pod's container, and wait for the exit.
stop() {
  kill -TERM "$1"
  local deadline=$((SECONDS + 30))
  while kill -0 "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || fail "$2 did not exit within 30 s of SIGTERM"
    sleep 0.2
  done
  echo "$2 stopped (SIGTERM)"
}
