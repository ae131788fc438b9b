#!/usr/bin/env bash
# Mutation testing of what a change touches, with cargo-mutants (`cargo install cargo-mutants --locked`):
#     scripts/mutants.sh                      # the library code changed since main (BASE=rev to compare with another)
#     scripts/mutants.sh FILE...              # whole files, e.g. shared-schema/src/scrub.rs
# Each package is mutated on its own, tested by its own tests (the fast ones: the library's unit tests, and
# for the ingest its API tests on Postgres, which need DATABASE_URL), one mutant at a time (-j1: every mutant
# is a build and a test run, and two builds at once only fight over the cores). Results go to
# target/mutants/<package>/mutants.out (caught.txt, missed.txt, timeout.txt, unviable.txt; MUTANTS_OUT=DIR
# for another place than target/mutants); write the summary of a run into docs/mutation/<module>.md (module,
# mutants, caught, missed, and what was decided for each miss: a test that kills it, or why it is
# equivalent).
#
# MUTANTS_TEST_ARGS replaces the test arguments of every package (e.g. `--lib -- scrub policy`: the lib
# tests whose names hold one of the words; cargo takes one name, the test binary after `--` several);
# MUTANTS_ARGS adds cargo-mutants options (e.g. `--list` to see the mutants without running them,
# `-F REGEX` to pick some, `--cargo-arg=--lib --cargo-arg=--test=api` to build only the test targets that
# run, `--in-place` to mutate and build in this tree: its target directory's dependencies are reused
# instead of built again in a copy, and the tree must be left alone until the run ends).
# One run at a time per target directory, and no other build of the same package into it meanwhile:
# cargo names a workspace member's test binaries the same from any checkout, so a second worktree
# sharing CARGO_TARGET_DIR (or a build in this tree) overwrites the binary a run is about to test, and
# that mutant is then judged by the other build's code.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_INCREMENTAL=0
base=${BASE:-main}

if [ $# -gt 0 ]; then
    files=("$@")
    diff_args=()
else
    mapfile -t files < <(git diff --name-only "$base"...HEAD -- '*.rs' | grep '/src/' || true)
    diff_file=$(mktemp)
    trap 'rm -f "$diff_file"' EXIT
    git diff "$base"...HEAD -- '*.rs' >"$diff_file"
    diff_args=(--in-diff "$diff_file")
fi
if [ ${#files[@]} -eq 0 ]; then
    echo "mutants: no library source changed since $base"
    exit 0
fi

# The package a file belongs to, and the tests that judge its mutants.
package_of() {
    case "$1" in
        shared-schema/*) echo apiary-schema ;;
        agent/*) echo apiary-agent ;;
        ingest/*) echo apiary-ingest ;;
        plumbing/*) echo plumbing ;;
        *) echo "" ;;
    esac
}
tests_of() {
    case "$1" in
        apiary-ingest) echo "--lib --test api" ;;
        *) echo "--lib" ;;
    esac
}

declare -A by_package
for f in "${files[@]}"; do
    p=$(package_of "$f")
    if [ -z "$p" ]; then
        echo "mutants: skipping $f (not in a library package)"
        continue
    fi
    by_package[$p]+=" $f"
done

status=0
for p in "${!by_package[@]}"; do
    file_args=()
    for f in ${by_package[$p]}; do
        file_args+=(--file "$f")
    done
    read -r -a test_args <<<"${MUTANTS_TEST_ARGS:-$(tests_of "$p")}"
    out="${MUTANTS_OUT:-target/mutants}/$p"
    mkdir -p "$out"
    echo "mutants: $p:${by_package[$p]} (tests: ${test_args[*]})"
    # shellcheck disable=SC2086 # MUTANTS_ARGS is a list of options
    # One mutant at a time (an in-place run has only the one tree, and refuses --jobs).
    jobs=(--jobs 1)
    case " ${MUTANTS_ARGS:-} " in *" --in-place "*) jobs=() ;; esac
    cargo mutants --package "$p" "${file_args[@]}" "${diff_args[@]}" "${jobs[@]}" \
        --output "$out" ${MUTANTS_ARGS:-} -- "${test_args[@]}" || status=$?
done
exit $status
