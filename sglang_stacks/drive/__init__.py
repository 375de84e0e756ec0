"""What drives stacks through Pulumi's Automation API: ``automation`` (the adapter: select or write
a stack, run a raw command, copy a secret, read outputs and config), ``rollout`` (one stack's
rollout and the gate's hand-back), ``fleet_rollback`` (a fleet's rollout, a regressed canary rolled
back) and ``recover`` (the pending operations an interrupted update left)."""
