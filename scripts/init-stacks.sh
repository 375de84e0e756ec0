#!/usr/bin/env bash
# Creates, in the current backend, every stack of stacks/ that it does not have yet. A stack whose
# file was encrypted under another passphrase is reported and skipped.
#
# `pulumi stack init` selects each stack it creates, which would leave the last one created (a
# stack preflight refuses) as the one a bare `pulumi up` targets: the stack selected before stays
# selected, and with none, baseline (the stack that deploys) is.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
names() { pulumi stack ls --json 2>/dev/null | python3 -c 'import json,sys; print("\n".join(s["name"] for s in json.load(sys.stdin)))' || true; }
existing=$(names)
selected=$(pulumi stack --show-name 2>/dev/null || true)
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
if [ -z "$selected" ] || ! grep -qx "$selected" <<<"$existing"; then
    selected=baseline
fi
if grep -qx "$selected" <<<"$(names)"; then
    pulumi stack select "$selected" --non-interactive >/dev/null
fi
