#!/usr/bin/env bash
# Creates, in the current backend, every stack of stacks/ that it does not have yet.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
existing=$(pulumi stack ls --json 2>/dev/null | python3 -c 'import json,sys; print("\n".join(s["name"] for s in json.load(sys.stdin)))' || true)
for file in stacks/Pulumi.*.yaml; do
    stack=${file#stacks/Pulumi.}
    stack=${stack%.yaml}
    if ! grep -qx "$stack" <<<"$existing"; then
        pulumi stack init "$stack" --non-interactive >/dev/null
    fi
done
