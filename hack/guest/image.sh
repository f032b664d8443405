#!/usr/bin/env bash
# Prepares the guest's kernel and base initramfs, reusing the cache when it is current.
#
# Prints one line: the folder holding `vmlinuz`, `base.cpio` and `kernel-version`.
# The kernel is Debian's linux-image-amd64, resolved to its versioned package at run time.
# The initramfs holds busybox (static), kmod, bash, iproute2, ipvsadm, ipset, iptables (legacy
# and nft), conntrack with their shared libraries, and the kernel modules the project uses.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$REPO_ROOT/hack/deps.sh"
mkdir -p "$GUEST_CACHE/debs"

# --- resolve and fetch the kernel ----------------------------------------------------------
resolve_kernel_pkg() {
  apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}
kpkg=$(resolve_kernel_pkg || true)
if [[ -z $kpkg ]]; then
  log "apt has no list for linux-image-amd64 yet; running apt-get update"
  apt-get update -q >/dev/null || true
  kpkg=$(resolve_kernel_pkg || true)
fi
if [[ -z $kpkg ]]; then
  # Offline but cached: use the newest kernel already unpacked, and say so.
  kpkg=$(ls -1d "$GUEST_CACHE"/linux-image-*-amd64 2>/dev/null | sort -V | tail -n1 | xargs -r basename)
  [[ -n $kpkg ]] || die "cannot resolve linux-image-amd64 (apt-cache depends found nothing) and no kernel is cached"
  log "cannot resolve linux-image-amd64; using cached $kpkg"
fi
kver=${kpkg#linux-image-}
kroot=$GUEST_CACHE/$kpkg
if [[ ! -f $kroot/.unpacked ]]; then
  log "downloading $kpkg"
  deb=$(ls "$GUEST_CACHE/debs/${kpkg}"_*.deb 2>/dev/null | sed -n 1p || true)
  if [[ -z $deb ]]; then
    # apt-get download writes into the current folder; _apt cannot write to ours, which is fine.
    (cd "$GUEST_CACHE/debs" && apt-get download -q "$kpkg" 2>&1 | grep -v 'unsandboxed' >&2 || true)
    deb=$(ls "$GUEST_CACHE/debs/${kpkg}"_*.deb 2>/dev/null | sed -n 1p || true)
    [[ -n $deb ]] || die "apt-get download $kpkg failed"
  fi
  rm -rf "$kroot"
  dpkg -x "$deb" "$kroot"
  # Debian generates modules.dep in postinst; we never run it, so do it here.
  depmod -b "$kroot" "$kver"
  touch "$kroot/.unpacked"
fi
[[ -f $kroot/boot/vmlinuz-$kver ]] || die "kernel package $kpkg has no boot/vmlinuz-$kver"

# --- what goes into the image ---------------------------------------------------------------
# Whole module folders: every netfilter, IPVS, ipset and SCTP module, so iptables matches and
# ipset types used by later features are there and autoload as on a real node.
module_dirs=(kernel/net/netfilter kernel/net/ipv4/netfilter kernel/net/ipv6/netfilter kernel/net/sctp)
# Single modules by name. crc32c_generic backs libcrc32c (a soft dependency busybox ignores).
module_names=(dummy veth crc32c_generic libcrc32c virtio_pci virtio_net nf_conntrack_netlink)

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
stamp=$( { echo "$kver"; cat "$GUEST_DIR/image.sh" "$GUEST_DIR/init"; printf '%s\n' "${tools[@]}";
           busybox 2>&1 | sed -n 1p; } | sha256sum | cut -c1-12)
out=$GUEST_CACHE/image-$kver-$stamp
if [[ -f $out/base.cpio && -f $out/vmlinuz ]]; then
  echo "$out"
  exit 0
fi

log "building the initramfs for $kver (cached in $out)"
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
rm -rf "$out"
mv "$tmp/out" "$out"
# Older images of this cache are dead weight once a new one exists.
find "$GUEST_CACHE" -maxdepth 1 -name 'image-*' ! -path "$out" -exec rm -rf {} +
log "image ready: $(du -sh "$out/base.cpio" | cut -f1) initramfs, $(find "$moddst" -name '*.ko*' | wc -l) modules"
echo "$out"
