#!/usr/bin/env bash
# Prepares the guest's kernel and base initramfs, reusing the cache when it is current.
#
# Prints one line: the folder holding `vmlinuz`, `base.cpio`, `kernel-version` and
# `kernel-package`. The kernel is Debian's linux-image-amd64 of the release GUEST_KERNEL names
# (5.10, 6.1 by default, 6.12), resolved to its versioned package at run time (kernel.sh).
# The initramfs holds busybox (static), kmod, bash, iproute2, ipvsadm, ipset, iptables (legacy
# and nft), conntrack with their shared libraries, and the kernel modules the project uses.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$REPO_ROOT/hack/deps.sh"
mkdir -p "$GUEST_CACHE/debs"

# --- resolve and fetch the kernel (GUEST_KERNEL, see kernel.sh) -------------------------------
source "$GUEST_DIR/kernel.sh"
guest_kernel_unpack

# --- what goes into the image ---------------------------------------------------------------
# Whole module folders: every netfilter, IPVS, ipset and SCTP module, so iptables matches and
# ipset types used by later features are there and autoload as on a real node.
module_dirs=(kernel/net/netfilter kernel/net/ipv4/netfilter kernel/net/ipv6/netfilter kernel/net/sctp)
# Single modules by name. crc32c_generic backs libcrc32c (a soft dependency busybox ignores).
# overlay: containerd's overlayfs snapshotter on the cluster's node (make cluster).
module_names=(dummy veth bridge crc32c_generic libcrc32c virtio_pci virtio_net nf_conntrack_netlink overlay)

tools=(
  /usr/bin/bash /usr/sbin/ip /usr/bin/ss /usr/sbin/tc
  /usr/sbin/ipvsadm /usr/sbin/ipvsadm-save /usr/sbin/ipvsadm-restore
  /usr/sbin/ipset /usr/sbin/conntrack
  /usr/bin/kmod /usr/sbin/modprobe /usr/sbin/insmod /usr/sbin/rmmod /usr/sbin/lsmod /usr/sbin/depmod /usr/sbin/modinfo
)
for f in /usr/sbin/ip6tables* /usr/sbin/iptables* /usr/sbin/xtables-*-multi; do
  case $f in *-apply|*-translate) continue ;; esac
  tools+=("$f")
done

# The image is rebuilt when the kernel or anything that shapes the image changes.
stamp=$( { echo "$kver"; cat "$GUEST_DIR/kernel.sh"; cat "$GUEST_DIR/image.sh" "$GUEST_DIR/init"; printf '%s\n' "${tools[@]}";
           busybox 2>&1 | sed -n 1p; } | sha256sum | cut -c1-12)
# One image per kernel series: building one kernel's image keeps the others' images.
out=$GUEST_CACHE/image-$kseries-$kver-$stamp
if [[ -f $out/base.cpio && -f $out/vmlinuz ]]; then
  echo "$out"
  exit 0
fi

log "building the initramfs for $kver ($kpkg $kdebver, Debian $ksuite; cached in $out)"
build_start=$SECONDS
tmp=$(mktemp -d "$GUEST_CACHE/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,usr/local/bin,etc,proc,sys,dev,tmp,run,root,opt/busybox/bin,var,payload}
# Merged /usr, as on Debian, so library and tool paths are the same as on the host.
ln -s usr/bin "$root/bin"; ln -s usr/sbin "$root/sbin"; ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
ln -s ../run "$root/var/run"

# Copies one file to the same canonical path inside the image (following symlinks).
put() {
  local src=$1 dir
  dir=$(realpath "$(dirname "$src")")
  mkdir -p "$root$dir"
  cp -L "$src" "$root$dir/$(basename "$src")"
}
# Copies the shared libraries an ELF file needs.
put_libs() {
  local lib
  while read -r lib; do
    [[ -n $lib && -e $lib ]] && put "$lib"
  done < <(ldd "$1" 2>/dev/null | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}')
}

for t in "${tools[@]}"; do
  [[ -e $t ]] || die "tool $t is missing on the host (hack/deps.sh should have installed it)"
  real=$(realpath "$t")
  if [[ ! -e $root$real ]]; then
    put "$real"
    put_libs "$real"
  fi
  # Keep the tool's own name (xtables multi-binaries dispatch on it) pointing at the real file.
  name=$(realpath "$(dirname "$t")")/$(basename "$t")
  [[ $name == "$real" ]] || ln -sf "$real" "$root$name"
done
# iptables loads its match and target extensions at run time: ship them all with their libraries.
for so in /usr/lib/x86_64-linux-gnu/xtables/*.so; do
  put "$so"; put_libs "$so"
done
ln -s bash "$root/usr/bin/sh"

# busybox applets sit last on PATH: the real tools above win (busybox's ip has no netns).
cp /bin/busybox "$root/usr/bin/busybox"
file -L /bin/busybox | grep -q 'statically linked' || die "/bin/busybox is not static (install busybox-static)"
for a in $(busybox --list); do
  ln -s /usr/bin/busybox "$root/opt/busybox/bin/$a"
done

cp /etc/protocols /etc/services "$root/etc/"
printf 'root:x:0:0:root:/root:/usr/bin/bash\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
printf 'hosts: files\n' >"$root/etc/nsswitch.conf"
printf '/usr/lib/x86_64-linux-gnu\n' >"$root/etc/ld.so.conf"
ldconfig -r "$root"

# Kernel modules and their dependencies, then a module index for kmod's modprobe.
mods=()
for d in "${module_dirs[@]}"; do
  [[ -d $kroot/lib/modules/$kver/$d ]] || die "kernel $kver has no module folder $d"
  while IFS= read -r f; do mods+=("$(basename "${f%%.ko*}")"); done < <(find "$kroot/lib/modules/$kver/$d" -name '*.ko*')
done
mods+=("${module_names[@]}")
moddst=$root/lib/modules/$kver
mkdir -p "$moddst"
modprobe -d "$kroot" -S "$kver" --show-depends -a "${mods[@]}" 2>"$tmp/modprobe.err" |
  awk '$1 == "insmod" {print $2}' | sort -u | while read -r ko; do
    rel=${ko#"$kroot/lib/modules/$kver/"}
    mkdir -p "$moddst/$(dirname "$rel")"
    cp "$ko" "$moddst/$rel"
  done
if grep -v 'builtin' "$tmp/modprobe.err" | grep -q .; then
  cat "$tmp/modprobe.err" >&2
  die "resolving kernel module dependencies failed"
fi
cp "$kroot/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$moddst/"
depmod -b "$root" "$kver"

install -m 0755 "$GUEST_DIR/init" "$root/init"
echo "$kver" >"$root/etc/kernel-version"

mkdir -p "$tmp/out"
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc --owner=0:0) >"$tmp/out/base.cpio"
cp "$kroot/boot/vmlinuz-$kver" "$tmp/out/vmlinuz"
echo "$kver" >"$tmp/out/kernel-version"
echo "$kpkg $kdebver (Debian $ksuite)" >"$tmp/out/kernel-package"
rm -rf "$out"
mv "$tmp/out" "$out"
# Older images of the same kernel series are dead weight once a new one exists; other
# series keep theirs.
find "$GUEST_CACHE" -maxdepth 1 -name "image-$kseries-*" ! -path "$out" -exec rm -rf {} +
log "image ready in $((SECONDS - build_start))s: $(du -sh "$out/base.cpio" | cut -f1) initramfs, $(find "$moddst" -name '*.ko*' | wc -l) modules"
echo "$out"
