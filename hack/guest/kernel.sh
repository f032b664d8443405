#!/usr/bin/env bash
# Resolves and unpacks the guest's kernel. Sourced by image.sh, not run.
#
# GUEST_KERNEL picks the kernel generation: 5.10 (Debian 11 bullseye), 6.1 (Debian 12 bookworm,
# the default) or 6.12 (Debian 13 trixie). The package is Debian's linux-image-amd64 of that
# release, resolved to its versioned package through apt with a private sources list, package
# lists and cache under $GUEST_CACHE/apt/<suite>: the machine's own apt sources and lists are
# never read for this nor changed.
#
# After `guest_kernel_unpack`: kseries (5.10|6.1|6.12), ksuite, kpkg (linux-image-<kver>),
# kver (the kernel release, as uname -r says), kdebver (the package version) and kroot (the
# unpacked package).
# shellcheck shell=bash

kseries=${GUEST_KERNEL:-6.1}
case $kseries in
5.10) ksuite=bullseye ;;
6.1) ksuite=bookworm ;;
6.12) ksuite=trixie ;;
*) die "GUEST_KERNEL=$kseries: choose 5.10 (Debian 11), 6.1 (Debian 12, the default) or 6.12 (Debian 13)" 2 ;;
esac
# Package lists older than this are refreshed (a failed refresh keeps the old ones).
apt_max_age_min=${GUEST_APT_MAX_AGE_MIN:-1440}

# The Debian mirror the machine itself uses (deb822 or one-line sources), so that the other
# suites come from the same host; deb.debian.org when none is configured.
debian_mirror() {
  local url
  url=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
    awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }')
  if [[ -z $url ]]; then
    url=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\/.*\/debian\/?$/) { print $i; exit } }')
  fi
  echo "${url:-http://deb.debian.org/debian}"
}

kapt_dir=$GUEST_CACHE/apt/$ksuite
kapt_opts=(
  -o "Dir::Etc::sourcelist=$kapt_dir/sources.list" -o Dir::Etc::sourceparts=-
  -o "Dir::State::Lists=$kapt_dir/lists" -o "Dir::Cache=$kapt_dir/cache"
  -o APT::Sandbox::User=root
)

# Writes the private sources list: the release, its updates and its security suite, as a
# Debian node of that release would have, so the resolved kernel is the one users run.
write_kernel_sources() {
  local mirror security
  mirror=$(debian_mirror)
  security=${mirror%/debian}/debian-security
  mkdir -p "$kapt_dir/lists/partial" "$kapt_dir/cache/archives/partial"
  cat >"$kapt_dir/sources.list.new" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $ksuite main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $ksuite-updates main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $security $ksuite-security main
EOF
  if ! cmp -s "$kapt_dir/sources.list.new" "$kapt_dir/sources.list"; then
    mv "$kapt_dir/sources.list.new" "$kapt_dir/sources.list"
    rm -f "$kapt_dir/updated"
  else
    rm -f "$kapt_dir/sources.list.new"
  fi
}

# Refreshes the private lists when missing or stale; a failure leaves the old lists in place.
update_kernel_lists() {
  if [[ -f $kapt_dir/updated && -z $(find "$kapt_dir/updated" -mmin +"$apt_max_age_min") ]]; then
    return 0
  fi
  log "updating the package lists of Debian $ksuite (private to the bench, in $kapt_dir)"
  if apt-get "${kapt_opts[@]}" -q update >"$kapt_dir/update.log" 2>&1; then
    touch "$kapt_dir/updated"
  else
    log "apt-get update for $ksuite failed (see $kapt_dir/update.log); using the lists already there"
  fi
}

resolve_kernel_pkg() {
  apt-cache "${kapt_opts[@]}" depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}

# The newest unpacked kernel of this series, for running offline.
cached_kernel_pkg() {
  local series_re=${kseries//./\\.}
  find "$GUEST_CACHE" -maxdepth 1 -name 'linux-image-*-amd64' -printf '%f\n' 2>/dev/null |
    grep -E "^linux-image-${series_re}[.-]" | sort -V | tail -n1
}

guest_kernel_unpack() {
  write_kernel_sources
  update_kernel_lists
  kpkg=$(resolve_kernel_pkg || true)
  if [[ -z $kpkg ]]; then
    kpkg=$(cached_kernel_pkg)
    [[ -n $kpkg ]] || die "cannot resolve linux-image-amd64 in Debian $ksuite and no $kseries kernel is cached"
    log "cannot resolve linux-image-amd64 in Debian $ksuite; using cached $kpkg"
  fi
  kver=${kpkg#linux-image-}
  kroot=$GUEST_CACHE/$kpkg
  if [[ ! -f $kroot/.unpacked ]]; then
    local deb
    deb=$(ls "$GUEST_CACHE/debs/${kpkg}"_*.deb 2>/dev/null | sed -n 1p || true)
    if [[ -z $deb ]]; then
      log "downloading $kpkg from Debian $ksuite"
      # apt-get download writes into the current folder.
      (cd "$GUEST_CACHE/debs" && apt-get "${kapt_opts[@]}" download -q "$kpkg" >&2) ||
        die "apt-get download $kpkg from Debian $ksuite failed"
      deb=$(ls "$GUEST_CACHE/debs/${kpkg}"_*.deb 2>/dev/null | sed -n 1p || true)
      [[ -n $deb ]] || die "apt-get download $kpkg wrote no package"
    fi
    rm -rf "$kroot"
    dpkg -x "$deb" "$kroot"
    # Debian 13 ships its modules under /usr/lib/modules (merged /usr); depmod and modprobe
    # look under ROOT/lib/modules.
    if [[ ! -e $kroot/lib && -d $kroot/usr/lib/modules ]]; then
      ln -s usr/lib "$kroot/lib"
    fi
    # Debian generates modules.dep in postinst; we never run it, so do it here.
    depmod -b "$kroot" "$kver"
    dpkg-deb -f "$deb" Version >"$kroot/.debversion"
    touch "$kroot/.unpacked"
  fi
  [[ -f $kroot/boot/vmlinuz-$kver ]] || die "kernel package $kpkg has no boot/vmlinuz-$kver"
  kdebver=$(cat "$kroot/.debversion" 2>/dev/null || echo unknown)
}
