"""Campaigns: a search space over SGLang configurations, swept over a pool of hosts.

``model`` reads ``campaigns/<name>.yaml``; ``axes`` expands its axes into candidates; ``plan``
keeps or discards each with preflight and the memory planner, touching no host; ``state`` keeps
a sweep's progress in ``reports/<name>/sweep.json``; ``runner`` runs the kept candidates as
trial stacks through the Automation API (``sglang_stacks.drive``); ``objective`` scores a
trial; ``rank`` orders trials with their 95 % intervals and significance; ``report`` writes the
Markdown report and its matplotlib figures; ``promote`` writes the winner into a stack file.
"""
