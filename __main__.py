"""The Pulumi program: wiring only. Reads the stack's config once into the typed spec, builds the
deployment (or, for a stack with a fleet section, the fleet), exports its outputs."""

import pulumi

from sglang_stacks.components.deployment import DeploymentArgs, SGLangDeployment, connection_args
from sglang_stacks.config.spec import SECTION_KEYS, load_spec
from sglang_stacks.errors import StacksError

config = pulumi.Config()
stack = pulumi.get_stack()
try:
    spec = load_spec(
        {key: config.get_object(key) for key in SECTION_KEYS if config.get(key) is not None}, stack
    )
    if spec.fleet is not None:
        from sglang_stacks.components.fleet import Fleet, FleetArgs  # a fleet's parts only for a fleet

        fleet = Fleet(
            stack,
            FleetArgs(
                stack=stack,
                spec=spec,
                ssh_private_key=config.get_secret("sshPrivateKey"),
                hub_token=config.get_secret("hubToken"),
            ),
        )
    else:
        deployment = SGLangDeployment(
            stack,
            DeploymentArgs(
                stack=stack,
                spec=spec,
                connection=connection_args(spec, config.get_secret("sshPrivateKey")),
                hub_token=config.get_secret("hubToken"),
            ),
        )
except StacksError as error:
    # The message already says what to fix; a traceback would only hide it. Its typed record
    # follows, for a driver (rollout, a sweep) to read back.
    raise pulumi.RunError(error.with_record()) from None

if spec.fleet is not None:
    pulumi.export("tok_s", fleet.tok_s)
    pulumi.export("router_url", fleet.router_url)
    pulumi.export("benchmark_levels", fleet.benchmark_levels)
    pulumi.export("replicas", fleet.replicas)
    pulumi.export("canary", fleet.canary)
    pulumi.export("launch_flags", fleet.launch_flags)
else:
    pulumi.export("tok_s", deployment.tok_s)
    pulumi.export("benchmark", deployment.benchmark)
    pulumi.export("benchmark_levels", deployment.benchmark_levels)
    pulumi.export("goodput", deployment.goodput)
    pulumi.export("launch_command", deployment.launch_command)
    pulumi.export("launch_flags", deployment.launch_flags)
    pulumi.export("sglang_version", deployment.sglang_version)
    pulumi.export("host", deployment.host_facts)
    pulumi.export("server_log", deployment.server_log)
    pulumi.export("preflight", deployment.findings)
    pulumi.export("memory_plan", deployment.memory_plan)
