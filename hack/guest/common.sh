# Shared settings of the guest bench. Sourced, not run.
# shellcheck shell=bash

GUEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$GUEST_DIR/../.." && pwd)
# Everything downloaded or built for the guest lives here (git-ignored); delete it to start over.
GUEST_CACHE=${GUEST_CACHE:-$REPO_ROOT/.cache/guest}

log() { printf 'guest: %s\n' "$*" >&2; }
die() { printf 'guest: ERROR: %s\n' "$1" >&2; exit "${2:-1}"; }
