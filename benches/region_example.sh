# Sourced by the scripts that measure the region benchmark's example (instructions.sh,
# atomics.sh, wall.sh): from the workspace root, builds the example and sets `binary` to it.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release -p tessera-benches --example region_instructions
binary="${CARGO_TARGET_DIR:-target}/release/examples/region_instructions"
