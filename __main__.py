"""The Pulumi program: wiring only. Reads the stack's config once into the typed spec, builds the
deployment (a fleet for a stack with a fleet section, pods for a kubernetes host, both for a fleet
on a cluster), exports its outputs."""

import os
from typing import Any

import pulumi

from sglang_stacks.components.deployment import DeploymentArgs, SGLangDeployment, connection_args
from sglang_stacks.config.passphrase import refuse_secrets_under_the_demo_passphrase
from sglang_stacks.config.spec import SECRET_KEYS, SECTION_KEYS, load_spec
from sglang_stacks.errors import SpecError, StacksError
from sglang_stacks.resources.provider_errors import without_the_monitors_echo
from sglang_stacks.resources.resource import Args

without_the_monitors_echo()
config = pulumi.Config()
stack = pulumi.get_stack()
outputs: Args[Any]
try:
    refuse_secrets_under_the_demo_passphrase(
        stack, [key for key in SECRET_KEYS if config.get_secret(key) is not None]
    )
    spec = load_spec(
        {key: config.get_object(key) for key in SECTION_KEYS if config.get(key) is not None}, stack
    )
    if spec.fleet is not None and spec.host.kind == "kubernetes":
        from sglang_stacks.kube.fleet import KubeFleet, KubeFleetArgs  # a cluster's fleet

        outputs = KubeFleet(
            stack, KubeFleetArgs(stack=stack, spec=spec, hub_token=config.get_secret("hubToken"))
        ).outputs
    elif spec.fleet is not None:
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
        outputs = fleet.outputs
    elif spec.host.kind == "kubernetes":
        from sglang_stacks.kube.deployment import KubeDeployment, KubeDeploymentArgs  # a cluster's parts

        outputs = KubeDeployment(
            stack, KubeDeploymentArgs(stack=stack, spec=spec, hub_token=config.get_secret("hubToken"))
        ).outputs
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
        outputs = deployment.outputs
except StacksError as error:
    if isinstance(error, SpecError) and os.environ.get("PULUMI_RUN_PROGRAM", "").lower() in ("1", "true"):
        # scripts/env.sh runs the program before the refresh, so a typo is refused before the hosts
        # are read; `pulumi destroy` then runs it too, and a stack file broken since the last
        # update must still be destroyable.
        error.message += (
            f"\nTo destroy the stack as deployed without fixing its file: "
            f"pulumi destroy -s {stack} --run-program=false"
        )
    # The message already says what to fix; a traceback would only hide it. Its typed record
    # follows when a driver (rollout, a sweep) asked for it, to read back.
    raise pulumi.RunError(error.with_record()) from None

outputs.export()
