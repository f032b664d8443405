#!/usr/bin/env bash
# Prints the folder holding what make conformance (hack/conformance/run.sh) needs to run
# Kubernetes' e2e specs on the cluster, building it on first use, with no registry and nothing
# to pull at run time:
#   e2e.test   `go test -c k8s.io/kubernetes/test/e2e` of v1.37.2 (module test/e2etest), its
#              version stamped as upstream's build does (e2e.test --version says v1.37.2)
#   ginkgo     ginkgo's CLI of the same module, to run e2e.test's specs in parallel
#   images/    `docker load` archives (linux/amd64), each tagged with the reference the suite's
#              image manifest (test/utils/image/manifest.go) gives it, for the node to import
#              with `ctr -n k8s.io images import`; images/images.txt says "NAME REFERENCE"
#     agnhost              test/images/agnhost of the module (static), with the Debian tools
#                          the specs run in it (hack/conformance/packages/agnhost.txt) and
#                          CoreDNS (test/coredns) as /coredns
#     busybox              Debian's busybox-static, an applet link per command
#     pause                our Go pause (test/node/cmd/pause) under the suite's pause tag
#     nginx                Debian's nginx serving on port 80
#     glibc-dns-testing    dig and getent on glibc
#     distroless-iptables  iptables, conntrack and a shell for the host-network pod
#     regression-issue-74839  test/images/regression-issue-74839 of the module (static), the
#                          Conntrack spec's server that sends a packet outside the TCP window
# Images other than pause are built by hack/image's Go tool from a root file system made by
# hack/image/rootfs.sh from the package list hack/conformance/packages/NAME.txt.
# Cached in the git-ignored .cache/conformance/<key>, the key hashing test/e2etest's module
# files, the package lists, hack/image, the pause and CoreDNS sources and this script; the
# Debian packages are those of hack/image/rootfs.sh's lists when the folder was built. Builds
# run under nice -n 19; each step's time goes to stderr. After building, the module's tests
# check the archives' names against the manifest and their files against what the specs run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
mod=$repo/test/e2etest
export PATH=$PATH:/usr/local/go/bin GOWORK=off
# The manifest's own registries: no list or mirror may rename the images.
unset KUBE_TEST_REPO_LIST KUBE_TEST_REPO
log() { printf 'conformance: %s\n' "$*" >&2; }

key=$(cat "$mod/go.mod" "$mod/go.sum" "$mod"/*.go "$mod"/cmd/*/*.go "$here"/packages/*.txt \
  "$repo"/hack/image/*.go "$repo"/hack/image/*.sh "$repo/hack/image/go.sum" \
  "$repo"/test/node/cmd/pause/*.go "$repo/test/coredns/go.mod" "$repo/test/coredns/go.sum" \
  "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
out=$repo/.cache/conformance/$key
if [[ -x $out/e2e.test && -x $out/ginkgo && -f $out/images/images.txt ]]; then
  log "from cache $out"
  echo "$out"
  exit 0
fi

log "building e2e.test, ginkgo and the test images (key $key; takes long the first time)"
mkdir -p "$repo/.cache/conformance"
tmp=$(mktemp -d "$repo/.cache/conformance/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
mkdir -p "$tmp/images" "$tmp/bin"

# step NAME COMMAND...: runs COMMAND niced, logging its time.
step() {
  local name=$1 t=$SECONDS
  shift
  # stdout is the folder's path only (run.sh reads it): a step's own output goes to stderr.
  nice -n 19 "$@" >&2 || { log "$name failed"; exit 1; }
  log "$name in $((SECONDS - t))s"
}

kv=$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
kmajor=${kv#v} kminor=${kv#v*.}
kmajor=${kmajor%%.*} kminor=${kminor%%.*}
kpkg=k8s.io/component-base/version
kflags="-X $kpkg.gitVersion=$kv -X $kpkg.gitMajor=$kmajor -X $kpkg.gitMinor=$kminor"
kflags+=" -X $kpkg.gitTreeState=clean"
cd "$mod"
# -vet=off: go test -c would vet the whole suite, which is upstream's business.
step e2e.test env CGO_ENABLED=0 go test -c -vet=off -trimpath -ldflags "-s -w $kflags" \
  -o "$tmp/e2e.test" k8s.io/kubernetes/test/e2e
step ginkgo env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/ginkgo" \
  github.com/onsi/ginkgo/v2/ginkgo
mapfile -t refs < <(go run ./cmd/e2e-images)
ref() {
  local l
  for l in "${refs[@]}"; do
    if [[ ${l%% *} == "$1" ]]; then echo "${l#* }"; fi
  done
}
agnhost_version=$(ref agnhost)
agnhost_version=${agnhost_version##*:}
step agnhost env CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X main.Version=$agnhost_version" -o "$tmp/bin/agnhost" \
  k8s.io/kubernetes/test/images/agnhost
step coredns env -C "$repo/test/coredns" CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$tmp/bin/coredns" github.com/coredns/coredns
step pause env -C "$repo/test/node" CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$tmp/bin/pause" ./cmd/pause
step regression-issue-74839 env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$tmp/bin/regression-issue-74839" k8s.io/kubernetes/test/images/regression-issue-74839
(cd "$repo/hack/image" && go build -trimpath -o "$tmp/bin/image" .)
agnhost_src=$(go list -f '{{.Dir}}' k8s.io/kubernetes/test/images/agnhost)

# root NAME: hack/image/rootfs.sh's root file system of packages/NAME.txt in $tmp/root-NAME.
root() {
  mkdir -p "$tmp/root-$1"
  IMAGE_PACKAGES=$here/packages/$1.txt step "$1's Debian packages" \
    "$repo/hack/image/rootfs.sh" amd64 "$tmp/root-$1"
}
# alternatives ROOT NAME=TARGET...: the links Debian's update-alternatives would have made.
alternatives() {
  local root=$1 a
  shift
  for a in "$@"; do ln -s "${a#*=}" "$root/usr/bin/${a%%=*}"; done
}

root agnhost
r=$tmp/root-agnhost
alternatives "$r" nc=nc.openbsd awk=mawk
cp "$tmp/bin/agnhost" "$tmp/bin/coredns" "$r/"
# Specs that check an image's entrypoint override it with agnhost-2.
ln -s agnhost "$r/agnhost-2"
# porter's TLS ports, netexec's uploads.
cp "$agnhost_src/porter/localhost.crt" "$agnhost_src/porter/localhost.key" "$r/"
chmod 644 "$r/localhost.crt" "$r/localhost.key"
mkdir -p "$r/uploads"
# The user and group a SupplementalGroups spec expects the image to define.
echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$r/etc/passwd"
printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' \
  >>"$r/etc/group"

root busybox
r=$tmp/root-busybox
for a in $("$r/usr/bin/busybox" --list); do
  [[ -e $r/usr/bin/$a ]] || ln -s busybox "$r/usr/bin/$a"
done

mkdir -p "$tmp/root-pause"
cp "$tmp/bin/pause" "$tmp/root-pause/pause"
# Upstream's image is the one static program too (its Dockerfile adds only it).
mkdir -p "$tmp/root-regression-issue-74839"
cp "$tmp/bin/regression-issue-74839" "$tmp/root-regression-issue-74839/"

root nginx
r=$tmp/root-nginx
# What nginx's maintainer scripts and upstream's image would have set up: its user, its
# folders, a server on port 80, logs to the container's output.
echo 'www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin' >>"$r/etc/passwd"
echo 'www-data:x:33:' >>"$r/etc/group"
mkdir -p "$r/var/lib/nginx" "$r/var/log/nginx" "$r/var/www/html" "$r/etc/nginx/conf.d"
ln -sf /dev/stdout "$r/var/log/nginx/access.log"
ln -sf /dev/stderr "$r/var/log/nginx/error.log"
cat >"$r/etc/nginx/conf.d/default.conf" <<'EOF'
server {
	listen 80 default_server;
	listen [::]:80 default_server;
	root /var/www/html;
	index index.html;
}
EOF
echo 'nginx (kube-ipvs conformance image)' >"$r/var/www/html/index.html"

root glibc-dns-testing

root distroless-iptables
alternatives "$tmp/root-distroless-iptables" which=which.debianutils

# image NAME ENTRYPOINT CMD: the archive images/NAME-amd64.tar of $tmp/root-NAME.
revision=$(git -C "$repo" rev-parse HEAD)
created=$(git -C "$repo" log -1 --format=%ct HEAD)
image() {
  local name=$1 ep=$2 cmd=$3 ref
  ref=$(ref "$name")
  [[ -n $ref ]] || { log "no reference for $name"; exit 1; }
  mkdir -p "$tmp/out-$name"
  step "image $ref" "$tmp/bin/image" build --root "linux/amd64=$tmp/root-$name" \
    --name "${ref%:*}" --version "${ref##*:}" --revision "$revision" --created "$created" \
    --entrypoint "$ep" --cmd "$cmd" --created-by "hack/conformance/build.sh ($ref)" \
    --out "$tmp/out-$name" >&2
  mv "$tmp/out-$name/$name-amd64.tar" "$tmp/images/"
  echo "$name $ref" >>"$tmp/images/images.txt"
}
image agnhost /agnhost pause
image busybox "" sh
image pause /pause ""
image nginx "" "nginx,-g,daemon off;"
image glibc-dns-testing "" sh
image distroless-iptables "" sh
image regression-issue-74839 /regression-issue-74839 ""

step "image checks" env CONFORMANCE_IMAGES="$tmp/images" go test -count=1 .
rm -rf "$tmp"/root-* "$tmp"/out-* "$tmp/bin"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
log "built in $((SECONDS - start))s, $(du -sh "$out" | cut -f1) in $out"
du -h "$out"/e2e.test "$out"/ginkgo "$out"/images/*.tar | sed 's/^/conformance:   /' >&2
echo "$out"
