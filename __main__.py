"""The Pulumi program: wiring only. Reads the stack's config once and builds the components."""

import pulumi

from components.process import Process

config = pulumi.Config()
port = config.get_int("demoPort") or 18080
stack = pulumi.get_stack()

server = Process(
    "demo-http",
    argv=["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
    log_path=f"/tmp/sglang-stacks-{stack}-demo-http.log",
)

pulumi.export("pid", server.pid)
pulumi.export("url", f"http://127.0.0.1:{port}/")
