#!/usr/bin/env bash
# Installs everything sglang-stacks needs on this machine, idempotently; a second run takes seconds.
#
#   - .venv: the project's virtualenv (Pulumi.yaml runs the program and its providers with it)
#   - the Pulumi CLI: a `pulumi` on PATH of an accepted version, else built once from its Go module
#     into a cache outside the repository, keyed by version
#   - beside it, Pulumi's Python helper scripts (program runner, dynamic-provider plugin) from the
#     SDK's Go module, and the project's language host (toolchain/pulumi-cli/languagehost) built as
#     `pulumi-language-python`
#   - .venv/sglang-stacks.env: the environment that scripts/env.sh exports (PATH, local backend, offline)
#
# Environment: SGLANG_STACKS_CACHE (default ~/.cache/sglang-stacks) holds the builds.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The Python SDK pinned in requirements.txt; Pulumi's Python helper scripts come from the same release.
PULUMI_SDK_VERSION=3.272.0
# The CLI built when none is on PATH. 3.272.0's Go module (pkg/v3) is not served by the module registry
# this project builds from; 3.274.1 is the nearest release that is, and runs SDK 3.272.0 programs.
PULUMI_CLI_VERSION=3.274.1
ACCEPTED_CLI_VERSIONS=("v$PULUMI_SDK_VERSION" "v$PULUMI_CLI_VERSION")
CACHE=${SGLANG_STACKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sglang-stacks}
PYTHON=${PYTHON:-python3}

say() { printf 'bootstrap: %s\n' "$*" >&2; }

# Where the pinned packages' wheels are kept, keyed by the requirements and the venv's Python.
wheelhouse() {
    local key
    key=$(cat "$ROOT/requirements.txt" "$ROOT/requirements-dev.txt" "$ROOT/pyproject.toml" \
        <("$ROOT/.venv/bin/python" -c 'import sys, sysconfig; print(sys.version, sysconfig.get_platform())') |
        sha256sum | cut -c1-16)
    echo "$CACHE/wheels/$key"
}

# The pinned packages as wheels, kept in the cache: the index is asked once; a later fresh clone
# installs from here, offline, in seconds. Prints the folder.
ensure_wheelhouse() {
    local dir partial
    dir=$(wheelhouse)
    if [[ ! -d "$dir" ]]; then
        say "fetching the pinned Python packages into $dir (once)"
        mkdir -p "$CACHE/wheels"
        partial=$(mktemp -d "$dir.partial.XXXXXX")
        # The build backend pyproject.toml names comes along: the project's own install builds offline.
        if ! "$ROOT/.venv/bin/python" -m pip wheel --quiet --disable-pip-version-check -w "$partial" \
            -r "$ROOT/requirements-dev.txt" "$(build_backend)"; then
            rm -rf "$partial"
            return 1
        fi
        mv -T "$partial" "$dir" 2>/dev/null || rm -rf "$partial" # another bootstrap finished first
    fi
    # Marked as used; wheels of other requirements not used for 30 days (and fetches abandoned a
    # day ago) are removed.
    touch "$dir"
    find "$CACHE/wheels" -mindepth 1 -maxdepth 1 -type d \( -name '*.partial.*' -mtime +1 -o -mtime +30 \) \
        -exec rm -rf {} + 2>/dev/null || true
    echo "$dir"
}

# The build backend requirement pyproject.toml declares (one, setuptools).
build_backend() {
    "$PYTHON" -c 'import sys, tomllib; print(*tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"])' \
        "$ROOT/pyproject.toml"
}

ensure_venv() {
    local stamp="$ROOT/.venv/.requirements.sha256" want wheels
    want=$(cat "$ROOT/requirements.txt" "$ROOT/requirements-dev.txt" "$ROOT/pyproject.toml" "$ROOT/setup.py" | sha256sum | cut -d' ' -f1)
    if [[ -x "$ROOT/.venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return
    fi
    say "creating .venv and installing the pinned Python packages (about 2 minutes once, then about half a minute from the kept wheels)"
    "$PYTHON" -m venv "$ROOT/.venv"
    wheels=$(ensure_wheelhouse)
    local pip=("$ROOT/.venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$wheels")
    # Compiled below, on every core at once, instead of one file after another here.
    "${pip[@]}" --no-compile -r "$ROOT/requirements-dev.txt"
    # The project itself, editable: the `sglang-stacks` command and `import sglang_stacks` anywhere.
    "${pip[@]}" --no-deps -e "$ROOT"
    compile "$("$ROOT/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    echo "$want" >"$stamp"
}

# Prints the directory holding an accepted `pulumi` and, beside it, the Python plugins the engine
# runs. Beside the binary is where the engine looks for its bundled plugins first.
ensure_toolchain() {
    local found version dir="$CACHE/pulumi-v$PULUMI_CLI_VERSION-python-v$PULUMI_SDK_VERSION/bin"
    if found=$(command -v pulumi 2>/dev/null) && [[ "$found" != "$dir/pulumi" ]]; then
        version=$(PULUMI_SKIP_UPDATE_CHECK=true "$found" version 2>/dev/null || true)
        for accepted in "${ACCEPTED_CLI_VERSIONS[@]}"; do
            if [[ "$version" == "$accepted" ]]; then
                dirname "$found"
                return
            fi
        done
        say "ignoring $found ($version): not one of ${ACCEPTED_CLI_VERSIONS[*]}"
    fi
    mkdir -p "$dir"
    if [[ ! -x "$dir/pulumi" ]]; then
        say "building the Pulumi CLI v$PULUMI_CLI_VERSION from its Go module (about 7 minutes on 2 cores, once)"
        (cd "$ROOT/toolchain/pulumi-cli" && GOFLAGS=-mod=mod go build -trimpath -buildvcs=false \
            -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_CLI_VERSION" \
            -o "$dir/pulumi.partial" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
        mv "$dir/pulumi.partial" "$dir/pulumi"
    fi
    if [[ ! -x "$dir/pulumi-language-python-exec" || ! -x "$dir/pulumi-resource-pulumi-python" ]]; then
        say "taking Pulumi's Python helper scripts v$PULUMI_SDK_VERSION from the SDK's Go module"
        local module
        module=$(cd "$ROOT/toolchain/pulumi-cli" && go mod download -json "github.com/pulumi/pulumi/sdk/v3@v$PULUMI_SDK_VERSION" \
            | "$ROOT/.venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
        install -m 0755 "$module/python/cmd/pulumi-language-python-exec" "$dir/"
        install -m 0755 "$module/python/dist/pulumi-resource-pulumi-python" "$dir/"
    fi
    ensure_language_host "$dir"
    echo "$dir"
}

# Builds the project's language host into $1 as `pulumi-language-python` unless the binary there
# is the one its sources build. The cache is shared by every checkout, so the stamp names both the
# sources and the binary they gave.
ensure_language_host() {
    local dir=$1 module="$ROOT/toolchain/pulumi-cli" want have
    want=$(cat "$module/languagehost/main.go" "$module/go.mod" "$module/go.sum" | sha256sum | cut -d' ' -f1)
    have=$(sha256sum "$dir/pulumi-language-python" 2>/dev/null | cut -d' ' -f1 || true)
    if [[ "$(cat "$dir/pulumi-language-python.stamp" 2>/dev/null)" == "$want $have" ]]; then
        return
    fi
    say "building the project's language host (seconds once the CLI is built)"
    # Another checkout's bootstrap may build at the same moment: each writes its own file, and the
    # rename replaces the host whole under any engine starting it.
    (cd "$module" && GOFLAGS=-mod=mod go build -trimpath -buildvcs=false -ldflags "-s -w" \
        -o "$dir/pulumi-language-python.partial.$$" ./languagehost)
    mv "$dir/pulumi-language-python.partial.$$" "$dir/pulumi-language-python"
    have=$(sha256sum "$dir/pulumi-language-python" | cut -d' ' -f1)
    echo "$want $have" >"$dir/pulumi-language-python.stamp"
}

write_env() {
    local toolchain_dir=$1 wheels
    wheels=$(wheelhouse)
    cat >"$ROOT/.venv/sglang-stacks.env" <<ENV
# Written by scripts/bootstrap.sh; exported by scripts/env.sh.
export SGLANG_STACKS_HOME="$ROOT"
export PATH="$ROOT/.venv/bin:$toolchain_dir:\$PATH"
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
export PULUMI_BACKEND_URL="\${PULUMI_BACKEND_URL:-file://\$HOME/.sglang-stacks/state}"
# The program runs before the refresh that Pulumi.yaml asks for: a stack file's mistake is refused
# in seconds, before any host is read.
export PULUMI_RUN_PROGRAM="\${PULUMI_RUN_PROGRAM:-true}"
ENV
    if [[ -d "$wheels" ]]; then
        # The pinned packages' wheels: the package installs elsewhere from them, offline
        # (pip install --no-index --find-links "$SGLANG_STACKS_WHEELS" path/to/sglang-stacks).
        echo "export SGLANG_STACKS_WHEELS=\"$wheels\"" >>"$ROOT/.venv/sglang-stacks.env"
    fi
}

# Modules compiled ahead: every Pulumi command starts several Python processes that import the
# project's modules and the packages', and Python caches nothing itself when PYTHONDONTWRITEBYTECODE
# is set. Up-to-date files are skipped; a file edited later is compiled from source until the next
# bootstrap. A file that does not compile is named and left to fail where it is imported.
compile() {
    if ! "$ROOT/.venv/bin/python" -m compileall -q -j 0 "$@" >&2; then
        say "could not compile every module (above); they are compiled when imported"
    fi
}

compile_modules() {
    local package packages=()
    for package in sglang_stacks sglang_flags sglang_world sglang_emulator components toolchain; do
        [[ -d "$ROOT/$package" ]] && packages+=("$ROOT/$package")
    done
    compile "${packages[@]}"
}

main() {
    ensure_venv
    compile_modules
    write_env "$(ensure_toolchain)"
}

main "$@"
