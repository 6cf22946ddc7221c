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
    return written + write_spec_weight_files(project)


def write_spec_weight_files(project: Path) -> list[Path]:
    """For every experiment YAML's ``made_by`` weight file (a file the project trains, e.g. transfer_cpu.yaml's),
    a stand-in at its path under ``project``: its backbone's seeded random weights in USB's file form, the same
    bytes on every run (the file's digest joins the trials' config hashes that the pins hold)."""
    import torch

    from experiments.transfer_cpu import write_usb_file
    from mutexmatch.models.registry import build_backbone

    written = []
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        base = raw.get("base") or {}
        for name in raw.get("made_by") or {}:
            if not (project / name).exists():
                torch.manual_seed(0)
                net = build_backbone(base["model"]["backbone"], num_classes=2, in_channels=3,
                                     image_size=base["data"]["image_size"])
                written.append(write_usb_file(net.state_dict(), project / name))
    return written


@pytest.fixture(scope="session")
def spec_imagefolders():
    """:func:`write_spec_imagefolders`, for the project fixtures of the experiment tests."""
    return write_spec_imagefolders
