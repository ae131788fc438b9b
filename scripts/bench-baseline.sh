#!/usr/bin/env bash
# Builds the agent of a baseline revision for the benches' same-run comparisons:
#     scripts/bench-baseline.sh [REV]     (default: origin/main if it exists, else HEAD)
# Checks REV out into a worktree under target/baseline/<sha>, builds `apiary-agent` in release there (its
# own target directory, kept, so a second call is instant) and prints the binary's path, e.g.
#     BENCH_BASELINE_BIN=$(scripts/bench-baseline.sh origin/main) cargo bench -p apiary-agent --bench realistic
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rev=${1:-HEAD}
sha=$(git rev-parse --verify "$rev^{commit}")
short=${sha:0:12}
root="$PWD/target/baseline"
tree="$root/src-$short"
bin="$root/apiary-agent-$short"
if [ -x "$bin" ]; then
    echo "$bin"
    exit 0
fi
mkdir -p "$root"
if [ ! -d "$tree" ]; then
    git worktree add --detach "$tree" "$sha" >&2
fi
CARGO_TARGET_DIR="$root/target" cargo build --release --locked --manifest-path "$tree/Cargo.toml" \
    -p apiary-agent --bin apiary-agent >&2
cp "$root/target/release/apiary-agent" "$bin"
git worktree remove --force "$tree" >&2 || true
echo "$bin"
