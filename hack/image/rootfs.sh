#!/usr/bin/env bash
# rootfs.sh ARCH ROOT: assembles the image's root file system for one architecture (amd64,
# arm64) in the empty folder ROOT, from the Debian packages in hack/image/packages.txt and
# every package they depend on, without a container engine and without running any
# maintainer script: apt resolves and downloads the packages with a private state (its own
# sources list, lists and cache under .cache/image/apt; the machine's own apt is untouched),
# dpkg -x unpacks them, and this script does the little the maintainer scripts would have
# done that matters at run time (the iptables alternatives, merged /usr, /etc/passwd).
# ROOT gets /usr/share/kube-ipvs/packages.txt ("name version arch" per package); the kube-ipvs
# binary is added by the caller. IMAGE_PACKAGES names another package list in the same format
# (hack/conformance builds the e2e test images from its own lists); it must hold netbase.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
arch=${1:?usage: rootfs.sh ARCH ROOT}
root=${2:?usage: rootfs.sh ARCH ROOT}
cache=${IMAGE_CACHE:-$repo/.cache/image}
# The Debian release the image is built from; its security and point-release updates are used.
release=${IMAGE_DEBIAN_RELEASE:-trixie}
log() { printf 'image: %s\n' "$*" >&2; }
die() { printf 'image: ERROR: %s\n' "$*" >&2; exit 1; }

# Packages that only maintainer scripts use (which never run here): telling apt they are
# installed keeps them, and what only they need (perl for debconf), out of the image.
not_needed=(debconf init-system-helpers)

apt_dir=$cache/apt-$release
mkdir -p "$apt_dir"/{lists/partial,cache/archives/partial,parts,prefs} "$cache/debs"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
cat >"$apt_dir/sources.list" <<EOF
deb [signed-by=$keyring] http://deb.debian.org/debian $release main
deb [signed-by=$keyring] http://deb.debian.org/debian $release-updates main
deb [signed-by=$keyring] http://deb.debian.org/debian-security $release-security main
EOF
for p in "${not_needed[@]}"; do
  printf 'Package: %s\nStatus: install ok installed\nArchitecture: all\nVersion: 99:99\n\n' "$p"
done >"$apt_dir/status"
apt_opts=(
  -o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=$apt_dir/parts"
  -o "Dir::Etc::preferences=$apt_dir/prefs/none" -o "Dir::Etc::preferencesparts=$apt_dir/prefs"
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
  -o "Dir::State::status=$apt_dir/status"
  -o "APT::Architecture=$arch" -o "APT::Architectures=amd64,arm64"
  -o APT::Install-Recommends=false -o APT::Install-Suggests=false
)

# Lists are refreshed once a day (or with IMAGE_APT_UPDATE=1): the same lists give the same
# package versions, hence the same image.
stamp=$apt_dir/lists/.updated
if [[ ${IMAGE_APT_UPDATE:-} == 1 || ! -f $stamp || -n $(find "$stamp" -mmin +1440) ]]; then
  log "apt-get update ($release, amd64 and arm64; private state in $apt_dir)"
  apt-get "${apt_opts[@]}" -q update >&2 || die "apt-get update of the private $release lists failed"
  touch "$stamp"
fi

mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "${IMAGE_PACKAGES:-$here/packages.txt}" | awk '{print $1}')
# apt's own resolver on an empty system: "Inst NAME (VERSION ... [ARCH])" per package.
resolved=$(apt-get "${apt_opts[@]}" -s install "${wanted[@]/%/:$arch}" 2>&1) ||
  die "resolving the packages failed: $resolved"
pkgs=$(sed -nE 's/^Inst ([^ :]+)(:[a-z0-9]+)? \(([^ ]+) [^[]*\[([a-z0-9]+)\]\).*/\1 \3 \4/p' <<<"$resolved" |
  LC_ALL=C sort)
[[ -n $pkgs ]] || die "apt resolved no package: $resolved"

# Downloads what the cache lacks (file names as apt writes them: NAME_VERSION_ARCH.deb, the
# epoch's colon escaped as %3a).
deb_of() { echo "$cache/debs/${1}_${2//:/%3a}_${3}.deb"; }
missing=()
while read -r name version a; do
  [[ -f $(deb_of "$name" "$version" "$a") ]] && continue
  [[ $a == all ]] && missing+=("$name=$version") || missing+=("$name:$a=$version")
done <<<"$pkgs"
if ((${#missing[@]} > 0)); then
  log "downloading ${#missing[@]} packages for $arch"
  (cd "$cache/debs" && apt-get "${apt_opts[@]}" -q download "${missing[@]}" 2>&1 | grep -v unsandboxed >&2) || true
fi

[[ -d $root && -z $(ls -A "$root") ]] || die "$root must be an empty folder"
while read -r name version a; do
  deb=$(deb_of "$name" "$version" "$a")
  [[ -f $deb ]] || die "apt-get download $name:$a=$version left no $deb"
  dpkg -x "$deb" "$root"
done <<<"$pkgs"

# Merged /usr, as base-files would have it: /bin, /sbin and /lib* are links into /usr.
for d in bin sbin lib lib64; do
  if [[ -d $root/$d && ! -L $root/$d ]]; then
    mkdir -p "$root/usr/$d"
    cp -a "$root/$d/." "$root/usr/$d/"
    rm -rf "${root:?}/$d"
  fi
  [[ -d $root/usr/$d ]] && ln -s "usr/$d" "$root/$d"
done

# What iptables's postinst does with update-alternatives: the plain names use nft, Debian's
# default. kube-ipvs itself calls iptables-{legacy,nft}-{save,restore} by backend. Only where
# iptables is in the list.
if [[ -e $root/usr/sbin/iptables-nft ]]; then
  for f in iptables ip6tables; do
    for suffix in "" -save -restore; do
      ln -s "$f-nft$suffix" "$root/usr/sbin/$f$suffix"
    done
  done
fi

# Documentation is not needed at run time; the copyright files stay (the licences).
find "$root/usr/share/doc" -type f ! -name copyright -delete
rm -rf "$root"/usr/share/{man,info,locale,lintian,bug,bash-completion,doc-base}
find "$root/usr/share/doc" -type d -empty -delete
# glibc's iconv modules (8 MiB): none of the tools converts character sets.
rm -rf "$root"/usr/lib/*-linux-gnu/gconv

mkdir -p "$root"/{etc,proc,sys,dev,tmp,run,root,var/lib,usr/local/bin,etc/kube-ipvs,lib/modules}
chmod 1777 "$root/tmp"
ln -sfn ../run "$root/var/run"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
[[ -f $root/etc/protocols && -f $root/etc/services ]] || die "netbase left no /etc/protocols or /etc/services"

mkdir -p "$root/usr/share/kube-ipvs"
echo "$pkgs" >"$root/usr/share/kube-ipvs/packages.txt"
log "$arch: $(wc -l <<<"$pkgs") Debian packages ($release)"
