#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the guest bench need, when missing.
# Idempotent: on a machine that has them all it does nothing and touches no package list.
set -euo pipefail

packages=(
  qemu-system-x86   # the emulator that boots the guest kernel
  busybox-static    # the guest's init and small tools (must be static: it runs before any library)
  kmod              # depmod for the guest's module tree; modprobe inside the guest
  cpio              # packs the initramfs
  iproute2 ipvsadm ipset iptables conntrack  # the tools users debug with, copied into the guest
  netbase           # /etc/protocols and /etc/services, read by iptables and ipset
  file              # tells static from dynamic binaries when the image is assembled
  debian-archive-keyring  # verifies the Debian packages make image fetches with its own apt state
  libseccomp-dev    # the cluster's runc links libseccomp statically (hack/cluster/binaries.sh)
)

installed() {
  [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]
}

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

if [[ $(id -u) != 0 ]]; then
  echo "deps: missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
