# Sourced by the scripts that measure the region benchmark's example (instructions.sh,
# atomics.sh, branches.sh, icache.sh, wall.sh): from the workspace root, builds the example
# with the cargo profile PROFILE (default `release`; `release-lto` for the whole-program
# optimised build) and sets `binary` to it.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
profile="${PROFILE:-release}"
cargo build --profile "$profile" -p tessera-benches --example region_instructions
binary="${CARGO_TARGET_DIR:-target}/$profile/examples/region_instructions"
