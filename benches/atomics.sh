#!/usr/bin/env bash
# Atomic read-modify-writes (lock-prefixed instructions and xchg with memory) executed per
# message in the Tessera binary's own code, through the node (by address and through
# EntityRef) and by raw typed calls, on the region benchmark's work (see
# benches/examples/region_instructions.rs): callgrind counts how often each instruction ran,
# objdump says which ones are locked. Each costs tens of cycles even uncontended, and more
# when two threads write the same line, where an instruction count weighs it as one.
# Needs valgrind, objdump and python3. Usage: benches/atomics.sh [ROUNDS]
set -euo pipefail
rounds="${1:-10}"
# shellcheck source=benches/region_example.sh
source "$(dirname "$0")/region_example.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
objdump -d --no-show-raw-insn "$binary" \
    | grep -E '^\s+[0-9a-f]+:\s+(lock |xchg\s+%\w+,(\(|0x))' \
    | awk '{ sub(":", "", $1); print $1 }' >"$work/locked"
run() { # side rounds -> callgrind output with per-instruction counts
    valgrind --tool=callgrind --dump-instr=yes --smc-check=all-non-file \
        --callgrind-out-file="$work/$1-$2" "$binary" "$1" "$2" >/dev/null 2>"$work/stderr" \
        || { cat "$work/stderr" >&2; exit 1; }
}
messages="$("$binary" node "$rounds" | grep -o '[0-9]*$')"
# Once first, discarded: the first run under valgrind may compile the component.
run node 0
for side in node ref raw; do run "$side" 0; run "$side" "$rounds"; done
python3 - "$work" "$rounds" "$messages" "$binary" <<'PY'
import collections, re, sys
work, rounds, messages, binary = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
locked = {int(line, 16) for line in open(f"{work}/locked")}
binary_name = binary.rsplit("/", 1)[-1]

def counts(path):
    """Executions per (instruction address, function) in the binary itself."""
    names, objects, seen = {}, {}, collections.Counter()
    obj = fn = None
    address, after_call = 0, False
    for line in open(path):
        for key, table in (("ob=", objects), ("cob=", objects), ("fn=", names), ("cfn=", names)):
            if line.startswith(key):
                match = re.match(r"\((\d+)\)(?: (.*))?", line[len(key):].strip())
                if match.group(2):
                    table[match.group(1)] = match.group(2)
                if key == "ob=":
                    obj = objects[match.group(1)]
                elif key == "fn=":
                    fn = names[match.group(1)]
                break
        else:
            if line.startswith("calls="):
                after_call = True
                continue
            if not line[:1] or line[0] not in "0123456789+-*":
                continue
            fields = line.split()
            position = fields[0]
            if position.startswith("0x"):
                address = int(position, 16)
            elif position[0] in "+-":
                step = position[1:]
                step = int(step, 16) if step.startswith("0x") else int(step)
                address += step if position[0] == "+" else -step
            if after_call:
                after_call = False  # the cost of a call, not of this instruction
                continue
            if obj and obj.endswith("/" + binary_name) and len(fields) >= 3:
                seen[(address, fn)] += int(fields[2])
    return seen

result = {}
for side in ("node", "ref", "raw"):
    busy, idle = counts(f"{work}/{side}-{rounds}"), counts(f"{work}/{side}-0")
    per_function = collections.Counter()
    for (address, fn), count in busy.items():
        if address in locked:
            per_function[fn] += count - idle.get((address, fn), 0)
    result[side] = per_function
print(f"atomic read-modify-writes per message over {messages} messages:",
      ", ".join(f"{label} {sum(result[side].values()) / messages:.1f}"
                for side, label in (("node", "node by address"),
                                    ("ref", "node through EntityRef"), ("raw", "raw"))))
print("where, through EntityRef:")
for fn, count in result["ref"].most_common(15):
    if count / messages >= 0.5:
        print(f"  {count / messages:5.1f}  {fn[:110]}")
PY
