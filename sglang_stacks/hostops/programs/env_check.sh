# Reports a Python environment as key=value lines: `state=absent`, or its absolute folder, the
# marker an install leaves when it finished, and the version the environment answers (or why not).
#   VENV     the venv folder (absolute: the caller's HostPath expands ~/)
#   RUNTIME  sglang or emulator;  RELEASE  the release the emulator emulates
#   MARKER   the marker file's name in the folder
#   INSTALLED_CHECK  sglang_installed.py's source: SGLang's version from its metadata, requirements checked
#   PROVE_IMPORT     1: then import SGLang too, and report the version it answers (when installing;
#                    a refresh reads metadata only: the import takes most of a second)
# From / without the caller's Python search path: a checkout in the working folder (or another
# venv on PYTHONPATH) must not stand in for what the environment holds.
unset PYTHONPATH PYTHONHOME PIP_TARGET PIP_PREFIX PIP_USER
cd / || exit 2

ask_version() {
    if [ "$RUNTIME" = emulator ]; then
        SGLANG_EMULATOR_RELEASE=$RELEASE "$VENV/bin/python" -m sglang_emulator --version
    else
        "$VENV/bin/python" -c "$INSTALLED_CHECK" || return
        if [ "${PROVE_IMPORT:-}" = 1 ]; then
            "$VENV/bin/python" -c 'import sglang; print(sglang.__version__)'
        fi
    fi
}

if [ ! -x "$VENV/bin/python" ]; then
    echo state=absent
    exit 0
fi
echo "venv=$(cd "$VENV" && pwd)"
echo "fingerprint=$(head -c 100 "$VENV/$MARKER" 2>/dev/null)"
if version=$(ask_version 2>&1); then
    echo "version=$(printf '%s\n' "$version" | tail -n 1)"
else
    echo "version_error=$(printf '%s\n' "$version" | tail -n 4 | tr '\n' ' ')"
fi
