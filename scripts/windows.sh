#!/usr/bin/env bash
# The agent on Windows, from Linux: scripts/windows.sh [packages|build|package|test|all]...
#
#   packages  apt-get installs Debian's Rust with its std source (rustc-web, cargo-web, rust-web-src), the
#             MinGW-w64 cross toolchain, Wine, wixl (msitools) and zip. Idempotent; needs root (or sudo).
#   build     cross-compiles apiary-agent.exe with Debian's cargo: -Z build-std (std rebuilt for
#             x86_64-pc-windows-gnu from rust-web-src), the `dist` profile (release, stripped, no debug
#             info), into target/windows. ~10 minutes on 2 cores from scratch.
#             Output: target/windows/x86_64-pc-windows-gnu/dist/apiary-agent.exe
#   package   target/windows/apiary-agent-windows-x86_64.zip (the exe, install.ps1, uninstall.ps1, README.txt)
#             and target/windows/apiary-agent-windows-x86_64.msi (per-user, built with wixl)
#   test      builds the test-only MinGW programs (a bcryptprimitives.dll that forwards ProcessPrng to
#             RtlGenRandom, which Wine 8 lacks; sddl.exe, which prints a file's DACL as SDDL), prepares a
#             private Wine prefix under target/windows/wine, then runs the Windows test target
#             (tests/tests/windows) under Wine and prints how many tests ran. Set APIARY_REQUIRE_WINDOWS=1
#             to fail, not skip, when something is missing (CI does).
#   all       the four, in order (the default)
#
# The build uses Debian's toolchain on purpose: rustup's targets are not installed here, and -Z build-std
# needs the std source of the compiler that builds it (RUSTC_BOOTSTRAP=1 allows -Z on a stable compiler).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ROOT=$PWD
TARGET=x86_64-pc-windows-gnu
WIN_DIR=$ROOT/target/windows
EXE=$WIN_DIR/$TARGET/dist/apiary-agent.exe
ZIP=$WIN_DIR/apiary-agent-windows-x86_64.zip
MSI=$WIN_DIR/apiary-agent-windows-x86_64.msi
TEST_BIN=$WIN_DIR/test-bin
# A Wine prefix of its own (not ~/.wine): made once by `wineboot -i`, reused by later runs.
export WINEPREFIX=$WIN_DIR/wine
export WINEDEBUG=${WINEDEBUG:--all}
export WINEDLLOVERRIDES=${WINEDLLOVERRIDES:-mscoree,mshtml=}

PACKAGES=(rustc-web cargo-web rust-web-src gcc-mingw-w64-x86-64 wine wine64 wixl zip)

packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        echo "installed: ${PACKAGES[*]}"
    else
        local sudo=""
        [ "$(id -u)" = 0 ] || sudo=sudo
        export DEBIAN_FRONTEND=noninteractive
        $sudo apt-get update -qq >/dev/null
        $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    /usr/bin/rustc --version
    x86_64-w64-mingw32-gcc --version | head -1
    wine --version
}

# Debian's cargo and rustc only: ~/.cargo/bin (rustup's) is left off PATH, so build scripts and the cc
# crate find the same compiler.
debian_cargo() {
    env PATH=/usr/local/bin:/usr/bin:/bin \
        RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 \
        CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc \
        CC_x86_64_pc_windows_gnu=x86_64-w64-mingw32-gcc \
        AR_x86_64_pc_windows_gnu=x86_64-w64-mingw32-ar \
        CARGO_INCREMENTAL=0 \
        /usr/bin/cargo "$@"
}

build() {
    debian_cargo build --locked -p apiary-agent --profile dist --target "$TARGET" \
        -Z build-std=std,panic_abort --target-dir "$WIN_DIR"
    ls -l "$EXE"
}

package() {
    [ -f "$EXE" ] || { echo "no $EXE: run scripts/windows.sh build first" >&2; return 1; }
    local stage=$WIN_DIR/package
    rm -rf "$stage" && mkdir -p "$stage/apiary-agent"
    cp "$EXE" deploy/windows/install.ps1 deploy/windows/uninstall.ps1 "$stage/apiary-agent/"
    sed 's/$/\r/' deploy/windows/README.txt >"$stage/apiary-agent/README.txt"
    rm -f "$ZIP"
    (cd "$stage" && zip -q -r -X "$ZIP" apiary-agent)
    local version
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
    rm -f "$MSI"
    # wixl reads the files named in the .wxs relative to the folder it runs in.
    cp deploy/windows/apiary-agent.wxs "$stage/apiary-agent/"
    (cd "$stage/apiary-agent" && wixl --arch x64 -D Version="$version" -o "$MSI" apiary-agent.wxs)
    ls -l "$EXE" "$ZIP" "$MSI"
}

# The test-only Windows programs (never shipped): see the header.
test_programs() {
    mkdir -p "$TEST_BIN"
    x86_64-w64-mingw32-gcc -O2 -shared -o "$TEST_BIN/bcryptprimitives.dll" \
        deploy/windows/test/processprng.c deploy/windows/test/processprng.def -ladvapi32
    x86_64-w64-mingw32-gcc -O2 -municode -o "$TEST_BIN/sddl.exe" deploy/windows/test/sddl.c -ladvapi32
    cp "$EXE" "$TEST_BIN/apiary-agent.exe"
}

wine_prefix() {
    if [ ! -f "$WINEPREFIX/system.reg" ]; then
        mkdir -p "$WINEPREFIX"
        wineboot -i >/dev/null 2>&1
        wineserver -w
    fi
    wine "$TEST_BIN/apiary-agent.exe" --version
}

test_windows() {
    [ -f "$EXE" ] || { echo "no $EXE: run scripts/windows.sh build first" >&2; return 1; }
    test_programs
    wine_prefix
    # One Wine server for the whole run (each test starts several Windows processes).
    wineserver -p 2>/dev/null || true  # already running: fine
    local log=$WIN_DIR/test.log status=0
    (
        # shellcheck source=scripts/pg.sh
        . scripts/pg.sh || exit 1
        trap 'apiary_pg_stop' EXIT
        # --workspace, as scripts/test.sh: the same feature set, so an earlier `scripts/test.sh` already
        # built the test binaries.
        APIARY_WINDOWS_AGENT="$TEST_BIN/apiary-agent.exe" APIARY_WINDOWS_SDDL="$TEST_BIN/sddl.exe" \
            cargo test --workspace --locked --test windows -- --test-threads=2
    ) 2>&1 | tee "$log" || status=$?
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    wineserver -k 2>/dev/null || true
    local passed
    passed=$(sed -n 's/^test result: .* \([0-9]\+\) passed.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    echo "Windows tests under Wine: $passed passed"
    if grep -q '^SKIPPED' "$log"; then
        echo "some Windows tests skipped (set APIARY_REQUIRE_WINDOWS=1 to fail instead):"
        grep '^SKIPPED' "$log"
    fi
    return "$status"
}

steps=("$@")
[ "${#steps[@]}" -gt 0 ] || steps=(all)
for s in "${steps[@]}"; do
    case $s in
    packages) packages ;;
    build) build ;;
    package) package ;;
    test) test_windows ;;
    all) packages && build && package && test_windows ;;
    *)
        echo "usage: scripts/windows.sh [packages|build|package|test|all]..." >&2
        exit 2
        ;;
    esac
done
