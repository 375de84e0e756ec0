"""How the project reads a cluster: the Kubernetes Python client, built from the kubeconfig and
context the stack names (the same pair the pulumi-kubernetes provider is given), one per call.

`ClusterAccess` is the typed pair every reader and dynamic provider takes; its client is built
inside each method that uses it (a dynamic provider is pickled: it holds no client).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ConfigDict

from sglang_stacks.config.findings import Finding, warning
from sglang_stacks.errors import HostError
from sglang_stacks.hostops.command_folder import update_folder
from sglang_stacks.shape import Shape

if TYPE_CHECKING:
    from sglang_stacks.config.kube import ClusterSpec

__all__ = ["INLINE_SECRETS", "ClusterAccess", "api_error_text"]

INLINE_SECRETS = ("client-key-data", "token", "password")
"""A kubeconfig user's fields that hold a credential itself rather than a file's path or a plugin."""


class ClusterAccess(Shape):
    """Which cluster, as whom, and where: a kubeconfig file, one of its contexts, a namespace."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kubeconfig: str
    """The kubeconfig file, its path expanded."""
    context: str | None = None
    """The context; None for the file's current one."""
    namespace: str = "default"
    """The namespace of the stack's objects."""

    @classmethod
    def of(cls, cluster: ClusterSpec) -> ClusterAccess:
        """The access a cluster section names, the kubeconfig defaulting as kubectl's does."""
        path = cluster.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config"
        return cls(
            kubeconfig=str(Path(path).expanduser()), context=cluster.context, namespace=cluster.namespace
        )

    @property
    def label(self) -> str:
        """How messages name the cluster."""
        context = f"context {self.context!r}" if self.context else "the current context"
        return f"the cluster of {context} in {self.kubeconfig}"

    def api_client(self) -> Any:
        """A Kubernetes API client for this access; HostError naming the file and context when the
        kubeconfig cannot be read."""
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        if not Path(self.kubeconfig).is_file():
            raise HostError(
                f"The kubeconfig {self.kubeconfig} does not exist. Point "
                "sglang-stacks:host.cluster.kubeconfig at the cluster's kubeconfig (for the local test "
                "cluster: scripts/ensure-k8s.sh prints it)."
            )
        configuration = type.__call__(client.Configuration)  # not a copy of the library's default
        # A kubeconfig with its credentials inline has them written to files for TLS: into this
        # command's private folder, removed when the command ends, never the shared temp folder.
        private = update_folder()
        try:
            config.load_kube_config(
                config_file=self.kubeconfig,
                context=self.context,
                client_configuration=configuration,
                persist_config=False,
                temp_file_path=str(private),
            )
        except (ConfigException, ValueError, OSError) as error:
            raise HostError(
                f"The kubeconfig {self.kubeconfig} cannot be used ({error}). Check the file and "
                "sglang-stacks:host.cluster.context (`kubectl config get-contexts` lists the contexts)."
            ) from None
        return client.ApiClient(configuration=configuration)

    def inline_secrets(self) -> list[str]:
        """The fields of the context's user that carry a credential inline (``client-key-data``,
        ``token``, ``password``): pulumi-kubernetes writes the kubeconfig it is given, with these, to
        a file of its own in the temp folder at every operation and leaves it there."""
        try:
            document = yaml.safe_load(Path(self.kubeconfig).read_text()) or {}
            name = self.context or document.get("current-context")
            context = next(c["context"] for c in document["contexts"] if c["name"] == name)
            user = next(u.get("user") or {} for u in document["users"] if u["name"] == context["user"])
        except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError, StopIteration):
            return []  # unreadable here: the client's own error names it
        return [field for field in INLINE_SECRETS if user.get(field)]

    def findings(self) -> list[Finding]:
        """Preflight's word on the kubeconfig itself: a warning when the provider will copy a
        credential out of it."""
        inline = self.inline_secrets()
        if not inline:
            return []
        return [
            warning(
                "kubeconfig-copied-by-provider",
                "host.cluster.kubeconfig",
                f"The kubeconfig {self.kubeconfig} holds its user's credential inline "
                f"({', '.join(inline)}). The "
                "pulumi-kubernetes provider writes the kubeconfig it is given to a file of its own "
                f"({tempfile.gettempdir()}/kubeconfig<digits>) at every preview, update, refresh "
                "and destroy, and never removes it: each copy holds that credential.",
                "Point the kubeconfig's user at files (client-certificate, client-key) or at an exec "
                "credential plugin (users[].user.exec), so the copies hold only paths; remove the "
                f"copies already made ({tempfile.gettempdir()}/kubeconfig*).",
            )
        ]

    def core(self) -> Any:
        """The core/v1 API (nodes, pods, logs, events)."""
        from kubernetes import client

        return client.CoreV1Api(self.api_client())

    def apps(self) -> Any:
        """The apps/v1 API (Deployments)."""
        from kubernetes import client

        return client.AppsV1Api(self.api_client())

    def batch(self) -> Any:
        """The batch/v1 API (Jobs)."""
        from kubernetes import client

        return client.BatchV1Api(self.api_client())

    def custom(self) -> Any:
        """The API of custom resources (LeaderWorkerSets)."""
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client())


def api_error_text(error: Exception) -> str:
    """What the API server or the connection said, in one line."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}".strip()
    return str(error).splitlines()[0] if str(error) else type(error).__name__
