#!/usr/bin/env bash
# Mispredicted branches per message through the node (by address and through EntityRef) and by
# raw typed calls, on the region benchmark's work (see benches/examples/region_instructions.rs),
# simulated by valgrind's cachegrind. Its predictor is far simpler than a real CPU's, so the
# counts rank where a message's branches go astray rather than price them. Deterministic, like
# benches/instructions.sh. Needs valgrind. Usage: benches/branches.sh [ROUNDS]
set -euo pipefail
rounds="${1:-10}"
# shellcheck source=benches/region_example.sh
source "$(dirname "$0")/region_example.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mispredicts() { # side rounds -> "conditional indirect" mispredicted branches
    valgrind --tool=cachegrind --cache-sim=no --branch-sim=yes --smc-check=all-non-file \
        --cachegrind-out-file=/dev/null "$binary" "$1" "$2" >"$work/stdout" 2>"$work/stderr" \
        || { cat "$work/stderr" >&2; exit 1; }
    grep 'Mispredicts:' "$work/stderr" | tr -d ',' \
        | sed -E 's/.*\( *([0-9]+) cond \+ *([0-9]+) ind.*/\1 \2/'
}
messages="$("$binary" node "$rounds" | grep -o '[0-9]*$')"
# Once under valgrind first, discarded: the first run may compile the component.
mispredicts node 0 >/dev/null
per_message() { # side -> "total (indirect)" per message
    local busy idle
    read -r -a busy <<<"$(mispredicts "$1" "$rounds")"
    read -r -a idle <<<"$(mispredicts "$1" 0)"
    local cond=$(( busy[0] - idle[0] )) ind=$(( busy[1] - idle[1] ))
    awk -v c="$cond" -v i="$ind" -v m="$messages" \
        'BEGIN { printf "%.1f (%.1f indirect)", (c + i) / m, i / m }'
}
echo "mispredicted branches per message over $messages messages:" \
    "node by address $(per_message node), node through EntityRef $(per_message ref)," \
    "raw $(per_message raw)"
