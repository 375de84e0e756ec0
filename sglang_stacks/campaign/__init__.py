"""Campaigns: a search space over SGLang configurations, swept over a pool of hosts.

``model`` reads ``campaigns/<name>.yaml``; ``axes`` expands its axes into candidates; ``plan``
keeps or discards each with preflight and the memory planner, touching no host; ``state`` keeps
a sweep's progress in ``reports/<name>/sweep.json``; ``runner`` runs the kept candidates as
trial stacks through the Automation API (``sglang_stacks.drive``); ``objective`` scores a
trial; ``rank`` orders trials with their 95 % intervals and significance; ``report`` writes the
Markdown report and its matplotlib figures; ``promote`` writes the winner into a stack file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_stacks._face import lazy_face

if TYPE_CHECKING:
    from sglang_stacks.campaign.model import CampaignSpec as CampaignSpec
    from sglang_stacks.campaign.model import load_campaign as load_campaign
    from sglang_stacks.campaign.plan import Plan as Plan
    from sglang_stacks.campaign.plan import PlanRow as PlanRow
    from sglang_stacks.campaign.plan import plan_campaign as plan_campaign

__all__ = ["CampaignSpec", "Plan", "PlanRow", "load_campaign", "plan_campaign"]

_HOMES = {
    "CampaignSpec": "model",
    "Plan": "plan",
    "PlanRow": "plan",
    "load_campaign": "model",
    "plan_campaign": "plan",
}
"""Each name's module: imported when the name is first read, so importing the package costs nothing."""

__getattr__, __dir__ = lazy_face(__name__, _HOMES)
