#!/usr/bin/env bash
# CPU of an idle three-node cluster (three `tessera node` processes on loopback, all voters,
# mutual TLS), by partition count: for each COUNT given ("default" leaves it to the node's
# default, 0 turns the plane off — the baseline), a fresh cluster is started, left to settle
# SETTLE seconds once node 1 is ready, and its processes' CPU (user + system, from
# /proc/<pid>/stat) is measured over SECONDS seconds; the last line per count is the total and
# its share of the machine's cores. Counts are measured one after another, so a baseline and
# the cluster it judges see the same minutes of the machine.
# Usage: benches/idle_cluster.sh [SECONDS] [COUNT...]   (default: 30 0 default)
# Builds the release binary first (cargo build --release --bin tessera).
set -euo pipefail
seconds="${1:-30}"
shift || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(0 default)
settle="${SETTLE:-20}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cargo build --release --bin tessera --manifest-path "$root/Cargo.toml" >/dev/null 2>&1
binary="${CARGO_TARGET_DIR:-$root/target}/release/tessera"
cores="$(nproc)"
ticks="$(getconf CLK_TCK)"
work="$(mktemp -d)"
pids=()
stop() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap 'stop; rm -rf "$work"' EXIT
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
port_base=$((29000 + RANDOM % 500 * 10))

for count in "${counts[@]}"; do
    dir="$work/$count"
    mkdir -p "$dir"
    "$binary" certs create --dir "$dir/certs" --nodes n1,n2,n3 >/dev/null
    pids=()
    for node in 1 2 3; do
        config="$dir/n$node.toml"
        echo 'admin_token = "idle-cluster-bench-admin-token"' >"$config"
        if [ "$count" != default ]; then
            printf '[sharding.partitions]\ncount = %s\n' "$count" >>"$config"
        fi
        seeds=()
        for peer in 1 2 3; do
            [ "$peer" = "$node" ] || seeds+=(--seed "n$peer=127.0.0.1:$((port_base + 5 + peer))")
        done
        "$binary" node --node-id "n$node" --data-dir "$dir/n$node" \
            --http "127.0.0.1:$((port_base + node))" --cluster-id idle \
            --cluster-listen "127.0.0.1:$((port_base + 5 + node))" --certs-dir "$dir/certs" \
            --voters n1,n2,n3 "${seeds[@]}" --config "$config" >"$dir/n$node.log" 2>&1 &
        pids+=($!)
    done
    ready=""
    for _ in $(seq 1 240); do
        ready="$(curl -s "127.0.0.1:$((port_base + 1))/v1/ready" || true)"
        case "$ready" in *'"ready":true'*) break ;; esac
        sleep 0.5
    done
    case "$ready" in *'"ready":true'*) ;; *) echo "count $count: never ready: $ready" >&2; exit 1 ;; esac
    sleep "$settle"
    declare -A before=()
    for pid in "${pids[@]}"; do before[$pid]="$(cpu_ticks "$pid")"; done
    sleep "$seconds"
    total=0
    for pid in "${pids[@]}"; do
        spent=$(($(cpu_ticks "$pid") - before[$pid]))
        total=$((total + spent))
        echo "count $count: pid $pid $(echo "scale=1; $spent * 1000 / $ticks / $seconds" | bc) ms/s"
    done
    ms=$(echo "scale=1; $total * 1000 / $ticks / $seconds" | bc)
    share=$(echo "scale=2; $ms / 10 / $cores" | bc)
    echo "count $count: total $ms ms/s = $share % of $cores cores"
    stop
    pids=()
    port_base=$((port_base + 10))
done
