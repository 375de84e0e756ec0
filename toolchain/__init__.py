"""The project's build and run tooling: the Go modules pinned for the programs scripts/ build (the
Pulumi CLI and the project's language host among them), and the local Kubernetes cluster
(``local_cluster``)."""
