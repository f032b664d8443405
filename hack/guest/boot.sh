#!/usr/bin/env bash
# Boots the guest with a payload and exits with the payload's exit status.
#
#   boot.sh STAGE   STAGE is a folder laid over the guest's root; it must hold payload/entry,
#                   a bash script the guest's /init runs from /payload.
#
# The console streams to stdout. Failures of the bench itself are loud and distinct:
#   124  the guest ran past GUEST_TIMEOUT seconds (hang)
#   125  the guest stopped without reporting a status (kernel panic, init died)
#   126  a core kernel module failed to load; 127 a tool is missing from the image
#
# Environment: GUEST_TIMEOUT (default 900), GUEST_MEM in MiB (2048), GUEST_CPUS (2),
# GUEST_APPEND (extra kernel arguments), GUEST_NET (extra QEMU arguments for a restricted
# network; by default the guest has no network device at all), GUEST_LOCKUP_PANIC (1, the
# default: a CPU stuck in the kernel for a minute panics the guest; 0: the kernel only reports
# it, for the long-lived, heavily loaded cluster node).
#
# A guest that stops without a status (hung, or panicked) ends with diagnose.sh's summary: the
# test that was running and the kernel's report.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

stage=${1:?usage: boot.sh STAGE}
[[ -f $stage/payload/entry ]] || die "$stage/payload/entry does not exist"
timeout_s=${GUEST_TIMEOUT:-900}

# One guest at a time on this machine: two emulated guests on two cores make every timing in
# both of them meaningless. Boots from other checkouts (worktrees, CI) wait here too.
exec 9>"${GUEST_LOCK:-/tmp/kube-ipvs-guest.lock}"
if ! flock -n 9; then
  log "another guest is running on this machine; waiting for it to stop"
  flock 9
fi

image=$("$GUEST_DIR/image.sh")
work=$(mktemp -d "${TMPDIR:-/tmp}/kipvs-guest.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The kernel unpacks concatenated cpio archives in order: the payload lands over the base.
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc --owner=0:0) >"$work/payload.cpio"
cat "$image/base.cpio" "$work/payload.cpio" >"$work/initrd"

# A soft lockup (a CPU looping in the kernel, e.g. ksoftirqd on a packet loop) would otherwise
# leave the guest running, and the run waiting for GUEST_TIMEOUT with only the repeated report
# on the console. With softlockup_panic the first report ends the guest; watchdog_thresh=30
# makes it 60 s stuck (an emulated CPU starved by a busy host for the default 20 s is not a
# lockup); panic_print=0x20 replays the kernel's log at full verbosity on panic, so the
# registers and call trace that "quiet" keeps off the console reach it.
kernel_args=""
if [[ ${GUEST_LOCKUP_PANIC:-1} == 1 ]]; then
  kernel_args="softlockup_panic=1 watchdog_thresh=30 panic_print=0x20"
fi

net_args=(-nic none)
if [[ -n ${GUEST_NET:-} ]]; then
  read -r -a net_args <<<"$GUEST_NET"
fi

: >"$work/status"
set +e
# stdin is closed so QEMU never puts the caller's terminal in raw mode; the console is a
# stream (sed drops the serial line's carriage returns) and is also kept for diagnosis.
timeout -k 10 "$timeout_s" qemu-system-x86_64 \
  -accel tcg -cpu max -m "${GUEST_MEM:-2048}" -smp "${GUEST_CPUS:-2}" \
  -display none -monitor none -no-reboot -nodefaults \
  "${net_args[@]}" \
  -chardev stdio,id=console,signal=off -serial chardev:console \
  -chardev file,id=status,path="$work/status" -serial chardev:status \
  -kernel "$image/vmlinuz" -initrd "$work/initrd" \
  -append "console=ttyS0 quiet panic=-1 no_timer_check kipvs.guest=1 $kernel_args ${GUEST_APPEND:-}" \
  </dev/null 2>"$work/qemu.err" | sed -u -e 's/\r$//' -e '/^\[ *[0-9.]*\] reboot: Power down$/d' | tee "$work/console.log"
rcs=("${PIPESTATUS[@]}")
set -e
qemu_rc=${rcs[0]}

status=$(tr -d '\r' <"$work/status" | awk '$1 == "KIPVS-EXIT" {print $2}' | tail -n1)
if [[ -n $status ]]; then
  exit "$status"
fi
"$GUEST_DIR/diagnose.sh" "$work/console.log"
if [[ $qemu_rc == 124 || $qemu_rc == 137 ]]; then
  die "the guest hung: no exit status after ${timeout_s}s (GUEST_TIMEOUT); it was killed" 124
fi
if grep -q 'Kernel panic' "$work/console.log"; then
  die "the guest kernel panicked (see the console output above)" 125
fi
[[ -s $work/qemu.err ]] && cat "$work/qemu.err" >&2
die "the guest stopped without reporting an exit status (QEMU exit code $qemu_rc)" 125
