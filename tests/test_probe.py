"""The nvidia-smi probe: parsing real captured output, a round trip over SSH, and the facts check."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglang_stacks.components.host import FACT_KEYS, ProbeInputs, ProbeOutputs, ProbeProvider
from sglang_stacks.config.spec import EMULATOR_HOST_FACTS, HostSpec
from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.probe import (
    ComputeApp,
    GpuInfo,
    HostFacts,
    compare_facts,
    parse_compute_apps,
    parse_query_gpu,
    parse_topology,
    probe,
)
from tests.sshd import SshServer, start_sshd

H200 = Path(__file__).parent / "fixtures" / "nvidia-smi" / "h200-1gpu"
UUID = "GPU-00000000-1111-2222-3333-444444444444"

# Multi-GPU matrices are not among the captures; these follow the layout `topo -m` prints
# (tab-separated, the header underlined with ANSI escapes), as the fixtures' README describes.
LEGEND = "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"


def matrix(links: list[list[str]]) -> str:
    n = len(links)
    header = (
        "\t\x1b[4m"
        + "\t".join(f"GPU{i}" for i in range(n))
        + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"
    )
    rows = [
        f"GPU{i}\t" + "\t".join(f" {c} " if c == "X" else c for c in row) + "\t0-47\t0\t\tN/A"
        for i, row in enumerate(links)
    ]
    return "\n".join([header, *rows]) + "\n" + LEGEND


def uniform(n: int, link: str) -> str:
    return matrix([["X" if i == j else link for j in range(n)] for i in range(n)])


def declared(**changes: object) -> HostSpec:
    """The host section a stack for the captured H200 machine would declare."""
    fields: dict[str, object] = {
        "kind": "ssh",
        "address": "gpu-box",
        "user": "ubuntu",
        "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA",
        "gpu_model": "NVIDIA H200",
        "gpu_count": 1,
        "memory_per_gpu_mib": 143771,
        "compute_capability": "9.0",
        "interconnect": "pcie",
    }
    fields.update(changes)
    return HostSpec.model_validate(fields)


def h200_facts() -> HostFacts:
    return HostFacts(
        gpus=tuple(parse_query_gpu((H200 / "query-gpu.csv").read_text())),
        compute_apps=(),
        interconnect=parse_topology((H200 / "topo.txt").read_text()),
    )


def test_query_gpu_reads_every_field_of_the_real_h200_output() -> None:
    gpus = parse_query_gpu((H200 / "query-gpu.csv").read_text())

    assert gpus == [
        GpuInfo(
            index=0,
            uuid=UUID,
            name="NVIDIA H200",
            memory_total_mib=143771,
            memory_used_mib=0,
            memory_free_mib=143156,
            compute_cap="9.0",
            driver_version="580.159.04",
            pci_bus_id="00000000:00:06.0",
            power_limit_w=700.0,
        )
    ]


def test_query_gpu_with_other_fields_is_refused_with_the_count() -> None:
    with pytest.raises(HostError, match="4 fields where 10 were asked for"):
        parse_query_gpu((H200 / "query-gpu-header.csv").read_text())


def test_query_gpu_tolerates_not_available_power() -> None:
    line = (
        "3, GPU-x, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 10, 97000, 12.0, 580.1, 0:1:0.0, N/A"
    )
    line = line.replace("N/A", "[N/A]")

    (gpu,) = parse_query_gpu(line)

    assert (gpu.index, gpu.compute_cap, gpu.power_limit_w) == (3, "12.0", None)


def test_compute_apps_reads_the_busy_process_and_nothing_when_idle() -> None:
    apps = parse_compute_apps((H200 / "compute-apps.csv").read_text())

    assert apps == [ComputeApp(pid=427, process_name="python3", used_memory_mib=19592, gpu_uuid=UUID)]
    assert parse_compute_apps("") == []


def test_topology_of_the_real_single_gpu_capture_with_ansi_escapes() -> None:
    text = (H200 / "topo.txt").read_text()

    assert "\x1b[4m" in text
    assert parse_topology(text) == "single"


@pytest.mark.parametrize(
    ("topology", "expected"),
    [
        (uniform(8, "NV18"), "nvlink"),
        (uniform(8, "SYS"), "pcie"),
        (
            matrix(
                [
                    ["X", "PIX", "NODE", "SYS"],
                    ["PIX", "X", "NODE", "SYS"],
                    ["NODE", "NODE", "X", "SYS"],
                    ["SYS", "SYS", "SYS", "X"],
                ]
            ),
            "pcie",
        ),
        # NVLink bridges in pairs: GPU0-1 and GPU2-3 bonded, across pairs PCIe.
        (
            matrix(
                [
                    ["X", "NV4", "SYS", "SYS"],
                    ["NV4", "X", "SYS", "SYS"],
                    ["SYS", "SYS", "X", "NV4"],
                    ["SYS", "SYS", "NV4", "X"],
                ]
            ),
            "pcie",
        ),
    ],
)
def test_topology_of_multi_gpu_matrices(topology: str, expected: str) -> None:
    assert parse_topology(topology) == expected


def test_topology_without_a_matrix_is_an_error() -> None:
    with pytest.raises(HostError, match="no GPU matrix"):
        parse_topology("Failed to initialize NVML: Driver/library version mismatch\n")


def test_matching_host_has_no_problems() -> None:
    assert compare_facts(declared(), h200_facts()) == []
    assert compare_facts(declared(gpu_model="H200", memory_per_gpu_mib=144000), h200_facts()) == []


def test_declared_eight_gpus_but_one_found() -> None:
    problems = compare_facts(declared(gpu_count=8, interconnect="nvlink"), h200_facts())

    assert problems == [
        "host.gpu_count declares 8 GPUs but 1 found (NVIDIA H200); set host.gpu_count to 1 "
        "or point the stack at the right host."
    ]


def test_every_differing_fact_is_named_with_the_value_to_declare() -> None:
    campaign_host = declared(
        gpu_model="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        memory_per_gpu_mib=97887,
        compute_capability="12.0",
    )

    problems = compare_facts(campaign_host, h200_facts())

    assert len(problems) == 3
    assert "GPU 0 is 'NVIDIA H200'; set host.gpu_model to 'NVIDIA H200'" in problems[0]
    assert "declares 97887 MiB but the host's GPUs have 143771 MiB" in problems[1]
    assert "declares 12.0 but the GPUs report 9.0; set host.compute_capability to '9.0'" in problems[2]


def test_nvlink_declared_on_a_pcie_host() -> None:
    facts = HostFacts(
        gpus=h200_facts().gpus * 8, compute_apps=(), interconnect=parse_topology(uniform(8, "SYS"))
    )

    problems = compare_facts(declared(gpu_count=8, interconnect="nvlink"), facts)

    assert problems == [
        "host.interconnect declares nvlink but the GPUs are linked by pcie (nvidia-smi topo -m); "
        "set host.interconnect to 'pcie'."
    ]


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    with start_sshd() as server:
        yield server


def fake_nvidia_smi(folder: Path, busy: bool = True) -> Path:
    """A stand-in that prints the real captures for the three probe commands."""
    script = folder / "nvidia-smi"
    apps = f"cat {H200 / 'compute-apps.csv'}" if busy else "true"
    script.write_text(
        "#!/bin/bash\n"
        'case "$1" in\n'
        f"  --query-gpu=*) cat {H200 / 'query-gpu.csv'} ;;\n"
        f"  --query-compute-apps=*) {apps} ;;\n"
        f"  topo) cat {H200 / 'topo.txt'} ;;\n"
        '  *) echo "unexpected arguments: $*"; exit 2 ;;\n'
        "esac\n"
    )
    script.chmod(0o755)
    return script


def test_probe_over_ssh_reads_gpus_processes_and_topology_in_one_call(
    sshd: SshServer, tmp_path: Path
) -> None:
    command = fake_nvidia_smi(tmp_path)

    facts = probe(sshd.connection(), nvidia_smi=(str(command),))

    assert facts.gpu_count == 1
    assert facts.gpus[0].name == "NVIDIA H200"
    assert facts.compute_apps[0].pid == 427
    assert facts.interconnect == "single"
    assert facts.summary()["compute_apps"] == ["427 python3"]


def test_probe_takes_a_multi_word_command(tmp_path: Path) -> None:
    command = fake_nvidia_smi(tmp_path, busy=False)

    facts = probe(Connection.local(), nvidia_smi=("bash", str(command)))

    assert (facts.gpu_count, facts.compute_apps) == (1, ())


def test_probe_reports_a_failing_driver_with_its_message(tmp_path: Path) -> None:
    broken = tmp_path / "nvidia-smi"
    broken.write_text(
        "#!/bin/bash\n"
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\n"
        "exit 9\n"
    )
    broken.chmod(0o755)

    with pytest.raises(HostError, match=r"exit 9.*could not communicate with the NVIDIA driver"):
        probe(Connection.local(), nvidia_smi=(str(broken),))


def test_probe_without_nvidia_smi_says_to_install_the_driver(tmp_path: Path) -> None:
    with pytest.raises(HostError, match="is not installed there; install the NVIDIA driver"):
        probe(Connection.local(), nvidia_smi=(str(tmp_path / "no-such-nvidia-smi"),))


def test_emulator_host_answers_the_probe_as_the_stacks_declare_it() -> None:
    facts = probe(Connection.local(), nvidia_smi=(sys.executable, "-m", "sglang_emulator.nvidia_smi"))

    assert compare_facts(HostSpec(), facts) == []
    assert {key: facts.summary()[key] for key in EMULATOR_HOST_FACTS} == EMULATOR_HOST_FACTS


def test_single_gpu_host_that_refuses_topology_still_probes(tmp_path: Path) -> None:
    command = fake_nvidia_smi(tmp_path)
    text = command.read_text().replace(f"cat {H200 / 'topo.txt'}", "echo 'topo: Not Supported'; exit 3")
    assert "Not Supported" in text
    command.write_text(text)

    facts = probe(Connection.local(), nvidia_smi=(str(command),))

    assert (facts.gpu_count, facts.interconnect) == (1, "single")


# -- the HostProbe resource's provider --------------------------------------------------------

EMULATOR_SMI = [sys.executable, "-m", "sglang_emulator.nvidia_smi"]


def probe_props(**declared: object) -> dict[str, object]:
    """The props HostProbe gives its provider, declaring the emulator host's facts."""
    facts = {key: EMULATOR_HOST_FACTS[key] for key in FACT_KEYS}
    return {
        "connection": {"kind": "local"},
        "declared": {**facts, **declared},
        "nvidia_smi": EMULATOR_SMI,
        "facts": None,
    }


def test_probe_state_of_the_previous_version_validates() -> None:
    old = probe_props(gpu_count=8.0, memory_per_gpu_mib=float(EMULATOR_HOST_FACTS["memory_per_gpu_mib"]))
    old["facts"] = {**old["declared"], "gpu_count": 8.0, "driver_version": "580.95.05"}  # type: ignore[dict-item]
    inputs, outputs = ProbeInputs.model_validate(old), ProbeOutputs.model_validate(old)
    assert isinstance(inputs.declared.gpu_count, int) and isinstance(outputs.facts.gpu_count, int)
    assert outputs.facts.driver_version == "580.95.05"
    assert ProbeInputs.model_validate(probe_props()).nvidia_smi == tuple(EMULATOR_SMI)


def test_probe_provider_records_the_facts_and_refuses_another_host() -> None:
    provider = ProbeProvider()

    created = provider.create(probe_props())
    outs = created.outs or {}
    with pytest.raises(HostError, match=r"host.gpu_count declares 4 GPUs but 8 found"):
        provider.create(probe_props(gpu_count=4))

    assert {key: outs["facts"][key] for key in FACT_KEYS} == {
        key: EMULATOR_HOST_FACTS[key] for key in FACT_KEYS
    }
    assert provider.read("probe", outs).outs == outs
    diff = provider.diff("probe", outs, probe_props(gpu_count=4))
    assert diff.changes and not diff.replaces and diff.stables == ["facts"]
    assert not provider.diff("probe", outs, probe_props()).changes
