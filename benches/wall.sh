#!/usr/bin/env bash
# Wall-clock time per message of the region benchmark's work (see
# benches/examples/region_instructions.rs) through the node by address, through EntityRef, by
# address through a sender-local map of EntityRefs (the floor of any send by address) and by
# raw typed calls, on one sender or SENDERS sender tasks (as many worker threads): each side
# is timed over ROUNDS rounds less a run of none (start-up), the best of REPEATS runs taken in
# turns, so that the machine's drift falls on every side alike.
# Usage: benches/wall.sh [ROUNDS] [SENDERS] [REPEATS]
set -euo pipefail
rounds="${1:-300}"
senders="${2:-1}"
repeats="${3:-5}"
# shellcheck source=benches/region_example.sh
source "$(dirname "$0")/region_example.sh"
messages="$("$binary" raw "$rounds" "$senders" | grep -o '[0-9]*$')"
nanos() { # side rounds -> wall-clock nanoseconds of one run
    local started
    started=$(date +%s%N)
    "$binary" "$1" "$2" "$senders" >/dev/null
    echo $(($(date +%s%N) - started))
}
declare -A best
for _ in $(seq "$repeats"); do
    for side in raw ref lookup node; do
        per_message=$(( ($(nanos "$side" "$rounds") - $(nanos "$side" 0)) / messages ))
        if [ -z "${best[$side]:-}" ] || [ "$per_message" -lt "${best[$side]}" ]; then
            best[$side]=$per_message
        fi
    done
done
echo "wall clock per message over $messages messages on $senders sender(s), best of $repeats:" \
    "node by address ${best[node]} ns, node through EntityRef ${best[ref]} ns," \
    "looked up by address ${best[lookup]} ns, raw ${best[raw]} ns;" \
    "raw / node = $(( 100 * best[raw] / best[node] ))%, raw / EntityRef = $(( 100 * best[raw] / best[ref] ))%," \
    "raw / looked up = $(( 100 * best[raw] / best[lookup] ))%"
