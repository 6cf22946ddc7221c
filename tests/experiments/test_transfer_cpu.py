"""The transfer check's helpers and sweep (issue 42 item 5, experiments/transfer_cpu.yaml): a run's saved weights
become USB's file form and load through ``model.pretrained``; the class-subset folders come out of the archive; the
sweep reads the weight file from the project and, without it, names the command that makes it."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import torch

from experiments.transfer_cpu import SUBSETS, convert, main
from mutexmatch.config import parse_config
from mutexmatch.data.fake import write_fake_imagefolder
from mutexmatch.models import build_model
from mutexmatch.models.pretrained import load_pretrained
from mutexmatch.models.registry import build_backbone
from orchestration.spec.models import SpecError
from orchestration.spec.sweepfile import expand_cells, load_spec, parse_spec, read_spec_file, spec_hash, trial_config

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
SPEC = EXPERIMENTS / "transfer_cpu.yaml"
WEIGHTS = "weights/transfer_cpu/vit_tiny_c0-4.pth"


def test_a_runs_weights_converted_load_through_model_pretrained(tmp_path: Path) -> None:
    torch.manual_seed(1)
    net = build_model("vit_tiny_patch2_32", num_classes=5, image_size=8)   # the network a run saves
    torch.save(net.state_dict(), tmp_path / "final_model.pt")
    out = convert(tmp_path / "final_model.pt", tmp_path / "w" / "usb.pth", overwrite=False)
    saved = torch.load(out, weights_only=True)
    assert list(saved) == ["model"] and set(saved["model"]) == set(net.backbone.state_dict())

    torch.manual_seed(2)
    fresh = build_backbone("vit_tiny_patch2_32", num_classes=5, image_size=8)
    report = load_pretrained(fresh, out, None, "vit_tiny_patch2_32")
    ours, theirs = fresh.state_dict(), net.backbone.state_dict()
    assert [k for k in ours if not torch.equal(ours[k], theirs[k])] == ["head.weight", "head.bias"]   # USB drops it
    assert "missing (kept at their initial values): head.weight, head.bias" in report[1]
    folder = write_fake_imagefolder(tmp_path / "photos", num_classes=2, train_per_class=2, test_per_class=1, side=8)
    cfg = parse_config({"data": {"dataset": "imagefolder", "root": str(folder), "num_labels": 2},
                        "model": {"backbone": "vit_tiny_patch2_32", "pretrained": str(out)}})
    assert cfg.model.pretrained_sha256 is not None   # the config reads it and checks it fits the backbone


def test_convert_refuses_what_is_not_a_runs_network(tmp_path: Path) -> None:
    torch.save({"model": {"w": torch.zeros(1)}}, tmp_path / "usb.pth")
    with pytest.raises(SystemExit, match=r"no tensor named backbone\.\*"):
        convert(tmp_path / "usb.pth", tmp_path / "out.pth", overwrite=False)
    (tmp_path / "there.pth").write_bytes(b"x")
    with pytest.raises(SystemExit, match="already there"):
        convert(tmp_path / "usb.pth", tmp_path / "there.pth", overwrite=False)


def _archive(path: Path) -> Path:
    classes = [f"c{i}" for i in range(10)]
    with tarfile.open(path, "w:gz") as tar:
        for split, n in (("train", 3), ("test", 4)):
            for cls in classes:
                for j in range(n):
                    info = tarfile.TarInfo(f"cifar/{split}/{cls}/{j:04d}.jpg")
                    data = f"{split}{cls}{j}".encode()
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return path


def test_folders_split_the_archive_by_class(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "a.tar.gz")
    main(["folders", "--archive", str(archive), "--to", str(tmp_path), "--test-per-class", "2"])
    for name, labels in SUBSETS.items():
        assert sorted(p.name for p in (tmp_path / name / "train").iterdir()) == [f"c{i}" for i in labels]
        test = tmp_path / name / "test" / f"c{labels[0]}"
        assert sorted(p.name for p in test.iterdir()) == ["0000.jpg", "0001.jpg"]
    assert (tmp_path / "cifar10-c5-9" / "train" / "c7" / "0002.jpg").read_bytes() == b"trainc72"
    with pytest.raises(SystemExit, match="already there"):
        main(["folders", "--archive", str(tmp_path / "a.tar.gz"), "--to", str(tmp_path)])


@pytest.fixture
def project(tmp_path: Path, spec_imagefolders) -> Path:
    spec_imagefolders(tmp_path)
    return tmp_path


def test_the_sweep_reads_the_weight_file_from_the_project(project: Path) -> None:
    spec = load_spec(SPEC, project)
    pretrained = {c.id: trial_config(spec, c, 0, project_dir=project)["model"].get("pretrained")
                  for c in expand_cells(spec)}
    assert pretrained == {"init=pretrained,setting=c5-9-40": str(project / WEIGHTS),
                          "init=random,setting=c5-9-40": None}


def test_without_the_weight_file_the_sweep_names_the_command_that_makes_it(project: Path) -> None:
    (project / WEIGHTS).unlink()
    with pytest.raises(SpecError) as e:
        load_spec(SPEC, project)
    assert str(e.value).splitlines() == [
        f"made_by.{WEIGHTS}: no such file ({project / WEIGHTS}); make it first with: "
        "python -m experiments.transfer_cpu folders --archive cifar10-jpeg.tar.gz --to data && "
        "python -m mutexmatch.train --config experiments/runs/transfer_cpu_pretrain.yaml && "
        "python -m experiments.transfer_cpu convert "
        f"outputs/transfer_cpu_pretrain/final_model.pt {WEIGHTS}"]


def test_the_commands_of_made_by_change_no_identity(project: Path) -> None:
    """made_by's text changes no trial: a relaunch after rewording it reuses every run (spec hash unchanged)."""
    raw = read_spec_file(SPEC)
    reworded = {**raw, "made_by": {WEIGHTS: "another command"}}
    assert spec_hash(parse_spec(reworded, project)) == spec_hash(parse_spec(raw, project))
