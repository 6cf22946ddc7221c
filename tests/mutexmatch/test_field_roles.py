"""Field roles are declared once, on the RunConfig schema fields, and every list that used to be written out by
hand is derived from them: the fields left out of the config hash, the fields orchestration owns, the fields that
may change on ``--resume`` and the fields a search may not vary (issue 17)."""

from __future__ import annotations

import pytest
import yaml

from mutexmatch import config as C
from mutexmatch.config import identity
from mutexmatch.training.command import _load_run_dir
from mutexmatch.training.runfolder import RUN_MARKER

# The hand-written lists these roles replaced (commit 0dd7fd9); the derived ones must name the same fields.
HASH_EXCLUDED = {"output_dir", "data.root", "data.download", "train.progress", "train.keep_freed_memory",
                 "train.deterministic", "train.num_threads", "train.device", "train.cuda_graphs"}
HASH_EXCLUDED |= {"plugins"}   # issue 44: where a plugin is (its code's digest is hashed where it is used)
HASH_EXCLUDED |= {"model.pretrained"}   # issue 42: where the weight file is (model.pretrained_sha256 is hashed)
OWNED = ["output_dir", "data.fold", "train.device"]
RESUMABLE = {"train.device", "train.progress", "train.num_threads", "train.cuda_graphs", "plugins"}


def test_derived_lists_name_the_fields_the_hand_written_lists_named():
    assert set(C.fields_with_role(C.NO_RESULT)) == HASH_EXCLUDED
    assert identity._HASH_EXCLUDE == {tuple(p.split(".")) for p in HASH_EXCLUDED}
    assert list(C.owned_fields()) == OWNED   # the order orchestration lists its errors in
    assert set(C.fields_with_role(C.RESUMABLE)) == RESUMABLE
    # Before, train.keep_freed_memory and train.deterministic were left out of the hash yet searchable.
    assert C.unsearchable_fields() == HASH_EXCLUDED | set(OWNED)


def test_unknown_role_is_refused():
    with pytest.raises(ValueError, match="unknown field roles"):
        C.roles("searchable")


@pytest.mark.parametrize("path, value", [("output_dir", "/elsewhere"), ("data.root", "/x"), ("data.download", True),
                                         ("train.progress", False), ("train.keep_freed_memory", False),
                                         ("train.deterministic", True), ("train.num_threads", 3),
                                         ("train.device", "cpu")])
def test_a_no_result_field_leaves_the_config_hash_alone(path, value):
    base = C.config_hash(C.parse_config({}))
    assert C.config_hash(C.parse_config(C.apply_overrides({}, [f"{path}={yaml.safe_dump(value).split()[0]}"]))) \
        == base


@pytest.mark.parametrize("path, value", [("data.fold", "1"), ("train.seed", "1"), ("algorithm.tau", "0.9")])
def test_a_result_field_changes_the_config_hash(path, value):
    assert C.config_hash(C.parse_config(C.apply_overrides({}, [f"{path}={value}"]))) != \
        C.config_hash(C.parse_config({}))


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / RUN_MARKER).write_text("{}")
    (d / "config.yaml").write_text(yaml.safe_dump(C.parse_config({}).to_dict()))
    return d


def test_resume_accepts_only_resumable_overrides(run_dir):
    cfg = _load_run_dir(run_dir, ["train.device=cpu", "train.progress=false", "train.num_threads=2"])
    assert (cfg.train.device, cfg.train.progress, cfg.train.num_threads) == ("cpu", False, 2)
    with pytest.raises(SystemExit, match=r"--set 'train.seed=1': only plugins, train.device, train.cuda_graphs, "
                                         r"train.num_threads, train.progress can change on --resume"):
        _load_run_dir(run_dir, ["train.seed=1"])


def test_the_reference_docs_show_each_fields_roles():
    doc = C.config_markdown()
    line = next(ln for ln in doc.splitlines() if ln.startswith("| `train.keep_freed_memory` |"))
    assert "*Role: does not change results (left out of the config hash; not searchable).*" in line
    line = next(ln for ln in doc.splitlines() if ln.startswith("| `data.fold` |"))
    assert "owned by a sweep: set per trial by orchestration from `folds`" in line
    assert "Role" not in next(ln for ln in doc.splitlines() if ln.startswith("| `train.seed` |"))
