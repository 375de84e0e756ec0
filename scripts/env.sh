# Source this file (`. scripts/env.sh`, in bash) to use the project's Pulumi toolchain in your shell:
# it puts the CLI, the language host and the project's virtualenv on PATH, selects the local state
# backend (~/.sglang-stacks/state unless PULUMI_BACKEND_URL is set), turns off update checks and
# plugin downloads, and creates the stacks of stacks/ that the backend does not have yet.
#
# Secrets: without PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE, the demo passphrase
# `sglang-stacks-demo` (scripts/demo.passphrase) is used, through PULUMI_CONFIG_PASSPHRASE_FILE: a
# passphrase file exported later replaces it, and a PULUMI_CONFIG_PASSPHRASE wins over it. No stack
# may keep a secret under it (the program refuses one that does); set your own for real hosts
# (see README, "Secrets").
_stacks_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ ! -f "$_stacks_root/.venv/sglang-stacks.env" ]; then
    echo "sglang-stacks: run scripts/bootstrap.sh first." >&2
    return 1 2>/dev/null || exit 1
fi
. "$_stacks_root/.venv/sglang-stacks.env"
case "$PULUMI_BACKEND_URL" in
    file://*) mkdir -p "${PULUMI_BACKEND_URL#file://}" ;;
esac
if [ -z "${PULUMI_CONFIG_PASSPHRASE+set}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
    export PULUMI_CONFIG_PASSPHRASE_FILE="$_stacks_root/scripts/demo.passphrase"
fi
"$_stacks_root/scripts/init-stacks.sh"
unset _stacks_root

# A `pulumi` command of this shell that fails is followed by what Pulumi's own message leaves out
# (`sglang-stacks check --after-failure`): a stack file's YAML error with its file, line and fix, or
# `sglang-stacks recover <stack>` for the lock a killed update left. Its exit code stays Pulumi's.
pulumi() {
    command pulumi "$@"
    local code=$? stack="" previous="" arg
    if [ "$code" -ne 0 ]; then
        for arg in "$@"; do
            case "$previous" in -s | --stack) stack=$arg ;; esac
            case "$arg" in --stack=*) stack=${arg#--stack=} ;; esac
            previous=$arg
        done
        [ -n "$stack" ] || stack=$(command pulumi stack --show-name 2>/dev/null)
        [ -z "$stack" ] || sglang-stacks check --after-failure "$stack" || true
    fi
    return "$code"
}
