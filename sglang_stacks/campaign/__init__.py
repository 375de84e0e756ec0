"""Campaigns: a search over SGLang configurations on a pool of hosts, kept in an Optuna study.

``model`` reads ``campaigns/<name>.yaml``; ``axes`` turns axis points into candidates; ``plan``
keeps or discards each with preflight and the memory planner, touching no host, and chooses the
strategy; ``search`` is the search itself without any host (what the study is told for each
outcome), on the axes as the study's parameters (``space``), the strategy's sampler and pruner
(``samplers``) and the objectives and constraints of a measured trial (``evaluation``); ``study``
keeps the campaign's state, an Optuna study in ``reports/<name>/study.db`` or a database, with each
trial's attributes (``attributes``); ``runner`` is ``sweep run``, whose ``sweep`` runs the
suggested candidates as trial stacks through the Automation API (``sglang_stacks.drive``) until the
search is over (``limits``), stops on Ctrl-C (``interrupt``) and settles the trials of a killed run
(``resume``); ``legacy`` imports the previous release's ``sweep.json``; ``objective`` reads a metric
at a load level; ``rank`` orders trials with their 95 % intervals and significance; ``report``
writes the Markdown report and its matplotlib figures (``figures``, drawing what ``frontier``
computes: the serving plane with its Pareto frontier, the search history); ``dashboard`` serves the
study in optuna-dashboard; ``promote`` writes a trial into a stack file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_stacks._face import lazy_face

if TYPE_CHECKING:
    from sglang_stacks.campaign.attributes import TrialAttributes as TrialAttributes
    from sglang_stacks.campaign.attributes import TrialRecord as TrialRecord
    from sglang_stacks.campaign.attributes import records as records
    from sglang_stacks.campaign.model import CampaignSpec as CampaignSpec
    from sglang_stacks.campaign.model import load_campaign as load_campaign
    from sglang_stacks.campaign.plan import Plan as Plan
    from sglang_stacks.campaign.plan import PlanRow as PlanRow
    from sglang_stacks.campaign.plan import plan_campaign as plan_campaign
    from sglang_stacks.campaign.search import Search as Search
    from sglang_stacks.campaign.space import SearchSpace as SearchSpace
    from sglang_stacks.campaign.study import open_study as open_study


__all__, __getattr__, __dir__ = lazy_face(__name__)
