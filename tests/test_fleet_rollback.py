"""The stack file a fleet's roll back deploys: the recorded configuration, with the secrets as the
stack file holds them (encrypted), never decrypted or dropped."""

from __future__ import annotations

import stat
from pathlib import Path

import yaml
from pulumi import automation as auto

from sglang_stacks.fleet_rollback import rollback_file

STACK_FILE = """\
encryptionsalt: v1:salt
config:
  sglang-stacks:server:
    cuda_graph_max_bs: 128
    disable_custom_all_reduce: false
  sglang-stacks:sshPrivateKey:
    secure: v1:ciphertext
"""


def test_the_roll_back_file_holds_the_recorded_sections_and_the_encrypted_secrets(
    tmp_path: Path,
) -> None:
    stack_file = tmp_path / "Pulumi.fleet.yaml"
    stack_file.write_text(STACK_FILE)
    recorded = {
        "sglang-stacks:server": auto.ConfigValue('{"cuda_graph_max_bs":128,"max_running_requests":64}'),
        "sglang-stacks:sshPrivateKey": auto.ConfigValue("[secret]", secret=True),
        "sglang-stacks:hubToken": auto.ConfigValue("[secret]", secret=True),
    }
    out = tmp_path / "out"
    out.mkdir()

    written = rollback_file(stack_file, recorded, out)

    document = yaml.safe_load(written.read_text())
    assert document["encryptionsalt"] == "v1:salt"
    assert document["config"] == {
        "sglang-stacks:server": {"cuda_graph_max_bs": 128, "max_running_requests": 64},
        "sglang-stacks:sshPrivateKey": {"secure": "v1:ciphertext"},
    }
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert stack_file.read_text() == STACK_FILE  # the user's file is left as it is
