"""Configuration: the stack spec, SGLang's typed launch flags, the memory planner and preflight.
Pure logic, no Pulumi resources and no host access."""
