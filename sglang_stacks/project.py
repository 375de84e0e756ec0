"""Where the project is: the folder with Pulumi.yaml (found upward, as the Pulumi CLI finds it),
its stack files (``stackConfigDir``), campaigns and reports. No Pulumi import: the commands that
only read files use it too."""

from __future__ import annotations

from pathlib import Path

import yaml

from sglang_stacks.errors import SpecError

__all__ = ["campaign_file", "find_project_dir", "reports_dir", "stacks_dir"]

_PROJECT_FILES = ("Pulumi.yaml", "Pulumi.yml")


def find_project_dir(start: Path | None = None) -> Path:
    """The nearest folder from ``start`` (default: the current one) upward that holds the Pulumi
    project file, as the Pulumi CLI finds it."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / name).is_file() for name in _PROJECT_FILES):
            return folder
    raise SpecError(
        f"No Pulumi.yaml in {here} or any folder above it. Run this from the sglang-stacks project "
        "folder (the one with Pulumi.yaml and stacks/)."
    )


def stacks_dir(project_dir: Path) -> Path:
    """Where the project keeps its stack files: ``stackConfigDir`` of Pulumi.yaml, else beside it."""
    project_file = next(project_dir / name for name in _PROJECT_FILES if (project_dir / name).is_file())
    settings = yaml.safe_load(project_file.read_text(encoding="utf-8")) or {}
    return project_dir / str(settings.get("stackConfigDir", "."))


def reports_dir(project_dir: Path) -> Path:
    """Where sweeps keep their state and reports: ``reports/`` of the project."""
    return project_dir / "reports"


def campaign_file(name_or_path: str, project_dir: Path) -> Path:
    """A campaign named on the command line: a path to a file, or a name in ``campaigns/``."""
    given = Path(name_or_path)
    if given.suffix in (".yaml", ".yml") or given.exists():
        return given if given.is_absolute() else Path.cwd() / given
    found = project_dir / "campaigns" / f"{name_or_path}.yaml"
    if not found.exists():
        known = sorted(p.stem for p in (project_dir / "campaigns").glob("*.yaml"))
        raise SpecError(
            f"There is no campaign {name_or_path!r} in campaigns/. "
            f"Use one of: {', '.join(known) or 'none yet'}, "
            "or give the path of a campaign file."
        )
    return found
