"""What drives stacks through Pulumi's Automation API: ``automation`` (the adapter: select or write
a stack, run a raw command, copy a secret, read outputs and config), ``rollout`` (one stack's
rollout and the gate's hand-back: ``rollout.rollout``), ``fleet_rollback`` (a fleet's rollout, a
regressed canary rolled back), and ``recover`` (the pending operations an interrupted update left:
``recover.recover``). A stack's state read into models is ``resources.state``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_stacks._face import lazy_face

if TYPE_CHECKING:
    from sglang_stacks.drive.automation import copy_secret as copy_secret
    from sglang_stacks.drive.automation import pulumi_command as pulumi_command
    from sglang_stacks.drive.automation import select_stack as select_stack
    from sglang_stacks.drive.automation import stack_config as stack_config
    from sglang_stacks.drive.automation import stack_outputs as stack_outputs
    from sglang_stacks.drive.automation import write_stack as write_stack
    from sglang_stacks.drive.fleet_rollback import FleetRollout as FleetRollout
    from sglang_stacks.drive.recover import Pending as Pending
    from sglang_stacks.drive.recover import pending_operations as pending_operations


__all__, __getattr__, __dir__ = lazy_face(__name__)
