"""The Pulumi resources: one module per resource (host probe and claim, Python environment, draft
model, server, benchmark) and ``SGLangDeployment``, the component that composes them."""
