"""Host operations: how a GPU host is reached and what runs there (the claim, the probe, the
serving note, the server process). No Pulumi here: the resources in ``components`` call these."""
