# Shared settings of the guest bench. Sourced, not run.
# shellcheck shell=bash

GUEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$GUEST_DIR/../.." && pwd)
# Everything downloaded or built for the guest lives here (git-ignored); delete it to start over.
GUEST_CACHE=${GUEST_CACHE:-$REPO_ROOT/.cache/guest}

log() { printf 'guest: %s\n' "$*" >&2; }
die() { printf 'guest: ERROR: %s\n' "$1" >&2; exit "${2:-1}"; }

# header_values SCRIPT KEY: the values of SCRIPT's "# KEY: VALUE" lines, space-joined, read
# from its leading comment block (the shebang included) only.
header_values() {
  local line key=$2 values=()
  while IFS= read -r line; do
    [[ $line == \#* ]] || break
    if [[ $line =~ ^#[[:space:]]*${key}:[[:space:]]*(.*[^[:space:]])[[:space:]]*$ ]]; then
      values+=("${BASH_REMATCH[1]}")
    fi
  done <"$1"
  echo "${values[*]}"
}
