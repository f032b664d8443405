#!/usr/bin/env bash
# diagnose.sh CONSOLE_LOG: what was happening when a guest stopped without reporting a status
# (it hung, or its kernel panicked). boot.sh calls it last, so that the few lines CI shows at
# the end of its output name the test that was running and the kernel's own report, however
# long the console was before them.
#
# It prints, to stderr:
#   - the guest test package and the go tests that had started but not ended (test.sh's entry
#     prints "=== guest: package IMPORT" before each package; go test -v prints "=== RUN" and
#     "--- PASS/FAIL/SKIP"), innermost last;
#   - the kernel's first report (a soft lockup, an oops, a hung task, an RCU stall, a panic) and,
#     when the kernel replayed its log on panic (boot.sh's panic_print), the registers and call
#     trace that came with its last report.
set -uo pipefail
log=${1:?usage: diagnose.sh CONSOLE_LOG}
[[ -r $log ]] || exit 0

report='BUG: |watchdog: |Oops|general protection fault|Kernel panic - not syncing|INFO: task .* blocked for more than|rcu: INFO: .* detected stall'

# Kernel lines can land in the middle of a line of test output on the shared console: match
# the test markers anywhere in a line, not only at its start.
running=$(awk '
  match($0, /=== guest: package [^ ]+/) { pkg = substr($0, RSTART + 19, RLENGTH - 19); n = 0; split("", open); next }
  match($0, /=== RUN +[^ ]+/) { s = substr($0, RSTART, RLENGTH); sub(/=== RUN +/, "", s); open[s] = 1; order[++n] = s; next }
  match($0, /--- (PASS|FAIL|SKIP): [^ ]+/) { s = substr($0, RSTART, RLENGTH); sub(/--- [A-Z]+: /, "", s); delete open[s]; next }
  /^(ok|FAIL)\t/ { pkg = ""; n = 0; split("", open) }
  END {
    if (pkg != "") print "package " pkg
    for (i = 1; i <= n; i++) if (order[i] in open) { print "test " order[i]; delete open[order[i]] }
  }' "$log")
if [[ -n $running ]]; then
  echo "guest: running when it stopped:" >&2
  sed 's/^/guest:   /' <<<"$running" >&2
fi

first=$(grep -a -m1 -E "$report" "$log")
[[ -z $first ]] && exit 0
echo "guest: the kernel's first report: ${first#*] }" >&2
# The registers and call trace of the last report, if the console has them (on panic the kernel
# replays its whole log at full verbosity; before that, "quiet" kept them off the console).
last=$(grep -a -n -E "$report" "$log" | grep -v 'Kernel panic' | tail -n1 | cut -d: -f1)
[[ -n $last ]] || exit 0
trace=$(tail -n +"$last" "$log" | head -n 60 | grep -a -E 'RIP:|Call Trace|^\[ *[0-9.]+\]  [? ]*[a-z_0-9.]+\+0x' | head -n 25)
if [[ -n $trace ]]; then
  echo "guest: its registers and call trace:" >&2
  sed 's/^/guest:   /' <<<"$trace" >&2
fi
exit 0
