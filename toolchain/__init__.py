"""The project's build and run tooling: the Pulumi language host, the Go modules pinned for the
programs scripts/ build, and the local Kubernetes cluster (``local_cluster``)."""
