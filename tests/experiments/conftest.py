"""Shared fixtures of the experiment tests: image folders where the experiment YAMLs expect them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mutexmatch.data.fake import write_fake_imagefolder

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def write_spec_imagefolders(project: Path) -> list[Path]:
    """For every experiment YAML whose base dataset is ``imagefolder``, a generated folder at its ``data.root``
    (relative to ``project``, as the sweep resolves it), large enough for 25 labels per class."""
    written = []
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        data = (yaml.safe_load(path.read_text()).get("base") or {}).get("data") or {}
        if data.get("dataset") == "imagefolder" and not (project / data["root"]).exists():
            written.append(write_fake_imagefolder(project / data["root"], train_per_class=40, test_per_class=2))
    return written


@pytest.fixture(scope="session")
def spec_imagefolders():
    """:func:`write_spec_imagefolders`, for the project fixtures of the experiment tests."""
    return write_spec_imagefolders
