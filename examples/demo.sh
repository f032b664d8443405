# make demo: kube-ipvs balancing real traffic inside the guest. Runs there via make guest-run;
# this folder's YAML files are the cluster (Services, EndpointSlices, a Node).
set -euo pipefail
source ./pods.sh

echo 1 >/proc/sys/net/ipv4/ip_forward
# The node's own address, where NodePort Services listen (the guest has no network card).
ip link add node0 type dummy
ip addr add 203.0.113.10/24 dev node0
ip link set node0 up

echo "== starting three backend pods (web-1..3) and four client pods"
for i in 1 2 3; do
  mkpod "web-$i" "10.244.1.1$i"
  inpod "web-$i" kipvs-echo serve --name "web-$i" --tcp 8080 --udp 5353 &
done
for c in 1 2 3 4; do mkpod "client-$c" "10.244.2.$c"; done

echo "== kube-ipvs run --manifests . (no cluster: the YAML files in examples/)"
kube-ipvs run --manifests . --hostname-override demo-node --log-level warn &
proxy=$!
trap 'kill $proxy 2>/dev/null || true' EXIT
wait_for 30 sh -c 'ipvsadm -Ln | grep -q "10.96.0.53:53"'
wait_for 10 inpod client-1 kipvs-echo ask 10.96.0.10:80

echo
echo "== web (ClusterIP 10.96.0.10:80, rr): 30 requests from client-1"
inpod client-1 kipvs-echo ask --count 30 --summary 10.96.0.10:80
echo
echo "== sticky (ClusterIP 10.96.0.20:80, sh + ClientIP affinity): 10 requests from each client"
for c in 1 2 3 4; do
  printf 'client-%s -> %s\n' "$c" "$(inpod "client-$c" kipvs-echo ask --count 10 --summary 10.96.0.20:80 | tr -s ' ' | paste -sd ' ')"
done
echo
echo "== shop (NodePort 203.0.113.10:30080, lc): 20 requests from client-2"
inpod client-2 kipvs-echo ask --count 20 --summary 203.0.113.10:30080
echo
echo "== dns (UDP 10.96.0.53:53, rr): 30 datagrams from client-3"
inpod client-3 kipvs-echo ask --udp --count 30 --summary 10.96.0.53:53
echo
echo "== addresses on kube-ipvs0"
ip -br addr show dev kube-ipvs0
echo
echo "== kube-ipvs explain demo/web (why traffic goes where it goes)"
kube-ipvs explain demo/web
echo
echo "== ipvsadm -Ln, and the same table with names: kube-ipvs list"
ipvsadm -Ln
echo
kube-ipvs list
