#!/usr/bin/env bash
# Instructions per message through the node vs raw typed calls, counted by valgrind's
# callgrind (see benches/examples/region_instructions.rs): the same on every run, unlike
# wall-clock time on a shared VM. Needs valgrind. Usage: benches/instructions.sh [ROUNDS]
set -euo pipefail
rounds="${1:-10}"
# shellcheck source=benches/region_example.sh
source "$(dirname "$0")/region_example.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
count() { # side rounds -> instructions executed
    valgrind --tool=callgrind --smc-check=all-non-file --callgrind-out-file="$work/out" \
        "$binary" "$1" "$2" >"$work/stdout" 2>"$work/stderr" \
        || { cat "$work/stderr" >&2; exit 1; }
    grep -o 'Collected : [0-9]*' "$work/stderr" | grep -o '[0-9]*$'
}
messages="$("$binary" node "$rounds" | grep -o '[0-9]*$')"
# Once under valgrind first, discarded: the first run under valgrind may compile the component
# (a native run's compiled-cache entry does not serve it), and must not be counted.
count node 0 >/dev/null
node=$(( ($(count node "$rounds") - $(count node 0)) / messages ))
by_ref=$(( ($(count ref "$rounds") - $(count ref 0)) / messages ))
raw=$(( ($(count raw "$rounds") - $(count raw 0)) / messages ))
echo "instructions per message over $messages messages: node by address $node," \
    "node through EntityRef $by_ref, raw $raw;" \
    "raw / node = $(( 100 * raw / node ))%, raw / EntityRef = $(( 100 * raw / by_ref ))%"
