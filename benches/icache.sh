#!/usr/bin/env bash
# Instruction-cache misses per message through the node (by address and through EntityRef)
# and by raw typed calls, on the region benchmark's work (see
# benches/examples/region_instructions.rs), simulated by valgrind's cachegrind with a 32 KiB,
# 8-way L1 instruction cache (this machine's). The hot code of one message — the guest's, the
# wasmtime call around it and the host's own — overflows that cache on the node's side, so
# its instructions run slower than an instruction count says. Deterministic, like
# benches/instructions.sh. Needs valgrind. Usage: benches/icache.sh [ROUNDS]
set -euo pipefail
rounds="${1:-10}"
# shellcheck source=benches/region_example.sh
source "$(dirname "$0")/region_example.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
misses() { # side rounds -> L1 instruction-cache misses
    valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 \
        --LL=1048576,16,64 --smc-check=all-non-file --cachegrind-out-file=/dev/null \
        "$binary" "$1" "$2" >"$work/stdout" 2>"$work/stderr" \
        || { cat "$work/stderr" >&2; exit 1; }
    grep 'I1  misses' "$work/stderr" | awk '{ gsub(",", "", $4); print $4 }'
}
messages="$("$binary" node "$rounds" | grep -o '[0-9]*$')"
# Once under valgrind first, discarded: the first run may compile the component.
misses node 0 >/dev/null
node=$(( ($(misses node "$rounds") - $(misses node 0)) / messages ))
by_ref=$(( ($(misses ref "$rounds") - $(misses ref 0)) / messages ))
raw=$(( ($(misses raw "$rounds") - $(misses raw 0)) / messages ))
echo "L1 instruction-cache misses per message over $messages messages (32 KiB, 8-way):" \
    "node by address $node, node through EntityRef $by_ref, raw $raw"
