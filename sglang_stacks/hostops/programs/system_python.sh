# Runs the Python program in $SGLANG_STACKS_PROGRAM with the host's system python3 and the
# positional parameters as its arguments. The system python3 first: it starts fastest (no
# version-manager shims); -I -S keep the user's site-packages and PYTHON* variables out.
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || {
    echo "sglang-stacks: the host has no python3, which sglang-stacks needs there; install python3" >&2
    exit 3
}
exec "$py" -I -S -c "$SGLANG_STACKS_PROGRAM" "$@"
