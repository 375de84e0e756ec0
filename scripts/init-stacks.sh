#!/usr/bin/env bash
# Creates, in the current backend, every stack of stacks/ that it does not have yet. A stack whose
# file was encrypted under another passphrase is reported and skipped.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
existing=$(pulumi stack ls --json 2>/dev/null | python3 -c 'import json,sys; print("\n".join(s["name"] for s in json.load(sys.stdin)))' || true)
for file in stacks/Pulumi.*.yaml; do
    stack=${file#stacks/Pulumi.}
    stack=${stack%.yaml}
    if ! grep -qx "$stack" <<<"$existing"; then
        if ! error=$(pulumi stack init "$stack" --non-interactive 2>&1 >/dev/null); then
            echo "sglang-stacks: could not create stack $stack: ${error#error: }" >&2
            if [[ "$error" == *"incorrect passphrase"* ]]; then
                echo "  Its file's encryptionsalt belongs to another passphrase; see README, Secrets." >&2
            fi
        fi
    fi
done
