"""Every experiment YAML (``experiments/*.yaml``, top level) is a valid sweep and a valid report layout, its tables
and published numbers sit on cells the sweep runs, and the paper-scale sweeps use the paper's training schedule.
Single-run configs (``experiments/runs/*.yaml``) load with :func:`mutexmatch.config.load_config`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from mutexmatch.algorithms import ALGORITHMS, declared_terms
from mutexmatch.config import load_config, parse_config
from mutexmatch.data.builtin import DATASETS
from mutexmatch.data.fake import write_fake_imagefolder
from orchestration.spec.plan import build_plan
from orchestration.spec.sweepfile import Cell, expand_cells, load_spec, trial_config
from orchestration.contract.layout import (CurvesFigure, HeatmapFigure, SensitivityFigure, parse_published,
                                           sensitivity_x, validate_report)
from orchestration.contract.published import EMPTY

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = REPO / "experiments"
SPECS = sorted(EXPERIMENTS.glob("*.yaml"))
RUNS = sorted((EXPERIMENTS / "runs").glob("*.yaml"))
# Sweeps that are not paper-scale benchmarks: the quickstart and the CPU-sized digits variants.
CPU_SCALE = {"quickstart.yaml", "cifar10_cpu.yaml", "cifar10_lt_cpu.yaml", "zoo_digits.yaml",
             "imbalanced_digits.yaml", "transfer_cpu.yaml"} | {
    p.name for p in SPECS if p.name.startswith("digits_")}
# Benchmarks of other papers, on their own schedule (each has its own test below).
OTHER_BENCHMARKS = {"usb_classic_cv.yaml", "shrinkmatch_published.yaml", "usb_classic_cv_imb.yaml", "usb_cv.yaml"}
PAPER_SCALE = [p for p in SPECS if p.name not in CPU_SCALE | OTHER_BENCHMARKS]


@pytest.fixture(scope="module")
def project(tmp_path_factory, spec_imagefolders) -> Path:
    """A project folder with an (empty) ``data`` root: the config checks that a non-digits root exists; an image
    folder's layout is checked too, so those are generated."""
    root = tmp_path_factory.mktemp("project")
    (root / "data").mkdir()
    spec_imagefolders(root)
    return root


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def _raw(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _positions(table, axes):
    """Every (group, row, column) position of a table and the full cell it shows."""
    for g in table.group_keys(axes):
        for r in table.row_keys(axes):
            for c in table.column_keys(axes):
                yield (g, r, c), table.cell(axes, g, r, c)


def test_the_paper_tables_and_figures_all_have_a_yaml() -> None:
    names = {p.name for p in SPECS}
    expected = {"table1_cifar_svhn.yaml", "table_cnn13_wrn.yaml", "table2_stl_mini_tiny.yaml",
                "ablation_svhn40_lambda_sg.yaml", "ablation_tnc_schemes.yaml", "ablation_lowconf.yaml",
                "ablation_nce.yaml", "ablation_tnc_consistency.yaml", "ablation_tau.yaml", "ablation_lr.yaml",
                "pseudo_label_accuracy.yaml", "ablation_k.yaml", "ablation_m.yaml"}
    assert expected <= names, sorted(expected - names)


def test_experiment_names_are_unique() -> None:
    names = [_raw(p)["name"] for p in SPECS]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("path", SPECS, ids=_ids(SPECS))
def test_spec_and_report_layout_validate_and_tables_sit_on_run_cells(path: Path, project: Path) -> None:
    spec = load_spec(path, project)            # orchestration: schema + every trial's RunConfig
    layout = validate_report(_raw(path), terms=declared_terms())   # reports: tables and figures against the axes
    # the grid's cells and the refit cells (a search's best parameters, shown in `tuned_rows`)
    run = {c.id for c in expand_cells(spec)} | {r.tuned_cell.id for r in build_plan(spec, project).refits}
    axes = layout.axes

    assert layout.tables, f"{path.name}: no table"
    for table in layout.tables:
        positions = dict(_positions(table, axes))
        # A table may leave excluded positions blank, but every row and column it lays out must hold a run cell.
        for key, index in (("row", 1), ("column", 2)):
            for level in {pos[index] for pos in positions}:
                cells = {Cell(tuple(c.items())).id for p, c in positions.items() if p[index] == level}
                assert cells & run, f"{path.name}:{table.id}: {key} {level!r} shows no cell the sweep runs"
        published = table.published_values(axes)
        for (g, r, c), value in published.items():
            cell = table.cell(axes, g, r, c)
            assert Cell(tuple(cell.items())).id in run, (
                f"{path.name}:{table.id}: published number at ({g}, {r}, {c}) is on a cell the sweep does not run")
            assert 0.0 < value.mean <= 100.0 and (value.std is None or 0.0 <= value.std < 100.0), (path, value)

    explicit = {f.get("id") for f in _raw(path).get("figures") or []}
    for fig in (f for f in layout.figures if f.id in explicit):  # defaults: one curve panel per table position
        if isinstance(fig, CurvesFigure):
            for partial in fig.cells:
                assert any(c.matches(partial) for c in expand_cells(spec)), (path.name, fig.id, partial)
        elif isinstance(fig, HeatmapFigure):
            assert Cell(tuple(fig.cell.items())).id in run, (path.name, fig.id)
        elif isinstance(fig, SensitivityFigure):
            assert sensitivity_x(fig, axes), (path.name, fig.id)


def _published_strings(table: dict) -> list[str]:
    out: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, (dict, list)):
            for v in (node.values() if isinstance(node, dict) else node):
                walk(v)
        else:
            out.append(node)  # type: ignore[arg-type]
    walk(table.get("published", {}))
    walk([q["values"] for q in table.get("quoted_rows", [])])
    return [v for v in out if v != EMPTY]     # a quoted row's cell the paper leaves empty


@pytest.mark.parametrize("path", SPECS, ids=_ids(SPECS))
def test_published_numbers_are_strings_as_printed(path: Path) -> None:
    """Quoted, so YAML cannot turn 93.20 into 93.2; each parses as mean (± std) with two decimals, as printed."""
    for table in _raw(path).get("tables", []):
        for value in _published_strings(table):
            assert isinstance(value, str), (path.name, table["id"], value)
            parsed = parse_published(value, f"{path.name}:{table['id']}")
            mean = value.split("±")[0]
            assert mean.count(".") == 1 and len(mean.split(".")[1]) == 2, (path.name, value)
            assert math.isfinite(parsed.mean)


@pytest.mark.parametrize("name, rows", [
    ("table1_cifar_svhn.yaml", [(None, "MixMatch", "†"), (None, "UDA", "†"), (None, "ReMixMatch", "†"),
                                (None, "SLA", "‡"), (None, "CoMatch", "*")]),
    ("table_cnn13_wrn.yaml", [("cnn13", "MT", "†"), ("cnn13", "ICT", "†"), ("cnn13", "DualStudent", "†"),
                              ("cnn13", "UPS", "†"), ("wrn", "EnAET", "‡"), ("wrn", "CoMatch", "*")]),
    ("table2_stl_mini_tiny.yaml", [("resnet18", "CoMatch", None), ("wrn", "CoMatch", None)]),
])
def test_paper_tables_quote_every_row_they_do_not_run(name: str, rows: list) -> None:
    """Every row the paper prints beside ours, with its mark and footnote; CoMatch names the level it becomes once
    the sweep runs it (issue 23)."""
    (table,) = validate_report(_raw(EXPERIMENTS / name)).tables
    assert [(q.group, q.label, q.mark) for q in table.quoted_rows] == rows
    assert {q.level for q in table.quoted_rows if q.label == "CoMatch"} == {"comatch"}
    assert all(table.footnotes[m] for m in {q.mark for q in table.quoted_rows} - {None})


@pytest.mark.parametrize("path", PAPER_SCALE, ids=_ids(PAPER_SCALE))
def test_paper_scale_sweeps_use_the_paper_schedule(path: Path, project: Path) -> None:
    """Settings section + released code: B=64, mu=7, SGD 0.9 Nesterov, wd 5e-4, cosine 7/16 (unless the LR table
    turns decay off), 2^20 iterations evaluated every 1024, EMA 0.999, official split rule, five folds; the data
    root is the project's relative `data` folder; MutexMatch-family trials name their loss form explicitly."""
    spec = load_spec(path, project)
    assert spec.folds == [0, 1, 2, 3, 4]
    assert spec.base["data"]["root"] == "data"
    for cell in expand_cells(spec):
        raw = trial_config(spec, cell, 0, project_dir=project)
        cfg = parse_config(raw)
        where = f"{path.name} {cell.id}"
        assert (cfg.train.iterations, cfg.train.eval_interval) == (2**20, 1024), where
        assert (cfg.train.batch_size, cfg.train.mu, cfg.train.ema) == (64, 7, 0.999), where
        assert (cfg.optim.momentum, cfg.optim.nesterov, cfg.optim.weight_decay) == (0.9, True, 5e-4), where
        assert cfg.optim.cosine_factor == 7 / 16, where
        if path.name != "ablation_lr.yaml":
            assert (cfg.optim.lr, cfg.optim.schedule) == (0.03, "cosine"), where
        assert cfg.data.split_rule == "official" and not cfg.data.svhn_extra, where
        assert cfg.data.root == str(project / "data"), where
        if "form" in ALGORITHMS[cfg.algorithm.name].Params.model_fields:
            assert "form" in raw["algorithm"], f"{where}: the loss form is left to the default"


def test_zoo_digits_runs_algorithms_of_the_package(project: Path) -> None:
    """Every row of the zoo runs an algorithm of the package (test-only algorithms registered by a conftest are not
    among them): zoo ⊆ registry, not equality, so that a new algorithm module needs no edit of this YAML, whose
    trials' hashes are pinned (tests/experiments/test_config_hash_pins.py). Every registered algorithm is trained by
    the registry-parametrised tests (tests/mutexmatch/test_algorithms.py) whether or not the zoo has its row."""
    spec = load_spec(EXPERIMENTS / "zoo_digits.yaml", project)
    names = {parse_config(trial_config(spec, cell, 0, project_dir=project)).algorithm.name
             for cell in expand_cells(spec)}
    package = {n for n, cls in ALGORITHMS.items() if cls.__module__.startswith("mutexmatch.algorithms.")}
    assert names and names <= package, f"zoo_digits.yaml rows not in mutexmatch.algorithms: {sorted(names - package)}"


def test_usb_classic_cv_uses_usbs_settings(project: Path) -> None:
    """USB's config/classic_cv/*.yaml: WRN-28-2 on every dataset, B=64, mu=7 (Pseudo-Label, Π-Model, Mean Teacher,
    VAT, MixMatch, ReMixMatch: 1), 2^20 steps evaluated
    every 5120, EMA 0.999, SGD 0.03 Nesterov with cosine 7/16, weight decay 5e-4 (CIFAR-100 1e-3), SVHN with its
    extra split, three folds; 9 settings, each cell with a published number (MixMatch's CIFAR-100 cells are a level
    of their own, USB's weight 150: issue 32)."""
    path = EXPERIMENTS / "usb_classic_cv.yaml"
    spec = load_spec(path, project)
    assert spec.folds == [0, 1, 2]
    settings = set()
    for cell in expand_cells(spec):
        raw = trial_config(spec, cell, 0, project_dir=project)
        cfg = parse_config(raw)
        where = f"{path.name} {cell.id}"
        settings.add((cfg.data.dataset, cfg.data.num_labels))
        assert cfg.model.backbone == "wrn28_2", where
        mu = 1 if cfg.algorithm.name in ("pseudolabel", "pimodel", "meanteacher", "vat", "mixmatch", "remixmatch") else 7
        assert (cfg.train.iterations, cfg.train.eval_interval, cfg.train.ema) == (2**20, 5120, 0.999), where
        assert (cfg.train.batch_size, cfg.train.mu) == (64, mu), where
        assert (cfg.optim.lr, cfg.optim.momentum, cfg.optim.nesterov, cfg.optim.schedule, cfg.optim.cosine_factor) \
            == (0.03, 0.9, True, "cosine", 7 / 16), where
        assert cfg.optim.weight_decay == (1e-3 if cfg.data.dataset == "cifar100" else 5e-4), where
        assert cfg.data.svhn_extra == (cfg.data.dataset == "svhn"), where
    assert settings == {(d, n) for d, ns in (("cifar10", (40, 250, 4000)), ("cifar100", (400, 2500, 10000)),
                                             ("svhn", (40, 250, 1000))) for n in ns}
    report = validate_report(_raw(path))
    (table,) = report.tables
    published = table.published_values(report.axes)
    rows = {r for (_, r, _) in published}
    cells = {(c.as_dict()["method"], c.as_dict()["setting"]) for c in expand_cells(spec)}
    assert rows == set(spec.axes["method"]) and {(r, col) for (_, r, col) in published} == cells


# USB's config/usb_cv/<algorithm>/<algorithm>_<dataset>_<labels>_0.yaml at 1ef4cbe, per dataset: (net, img_size,
# crop_ratio, lr, layer_decay) and the label counts
USB_CV = {"cifar100": ("vit_small_patch2_32", 32, 0.875, 5e-4, 0.5, (200, 400)),
          "stl10": ("vit_base_patch16_96", 96, 0.875, 1e-4, 0.65, (40, 100)),
          "eurosat": ("vit_small_patch2_32", 32, 0.875, 5e-5, 1.0, (20, 40)),
          "tissuemnist": ("vit_tiny_patch2_32", 32, 0.95, 5e-5, 0.95, (80, 400))}


def test_usb_cv_uses_usbs_settings(project: Path) -> None:
    """USB's config/usb_cv/*.yaml (issue 42 item 4): AdamW, weight decay 5e-4, warm-up 5120 then cosine 7/16 over
    204,800 steps evaluated every 2048, B=8, mu=1, no EMA (ema_m 0), each dataset's ViT, image size, crop ratio,
    learning rate and layer decay; three folds, every cell quoted."""
    path = EXPERIMENTS / "usb_cv.yaml"
    spec = load_spec(path, project)
    assert spec.folds == [0, 1, 2]
    settings = set()
    for cell in expand_cells(spec):
        cfg = parse_config(trial_config(spec, cell, 0, project_dir=project))
        where, d = f"{path.name} {cell.id}", cfg.data
        net, size, crop, lr, decay, _ = USB_CV[d.dataset]
        settings.add((d.dataset, d.num_labels))
        assert (cfg.model.backbone, d.image_size or DATASETS[d.dataset].info.image_size, d.crop_ratio) == (
            net, size, crop), where
        o = cfg.optim
        assert (o.name, o.lr, o.layer_decay, o.weight_decay, o.warmup, o.schedule, o.cosine_factor) == (
            "adamw", lr, decay, 5e-4, 5120, "cosine", 7 / 16), where
        assert (cfg.train.iterations, cfg.train.eval_interval, cfg.train.ema, cfg.train.batch_size, cfg.train.mu) == (
            204800, 2048, 0.0, 8, 1), where
    assert settings == {(d, n) for d, v in USB_CV.items() for n in v[-1]}
    report = validate_report(_raw(path))
    (table,) = report.tables
    cells = {(c.as_dict()["method"], c.as_dict()["setting"]) for c in expand_cells(spec)}
    assert {(r, col) for (_, r, col) in table.published_values(report.axes)} == cells


@pytest.mark.parametrize("path", PAPER_SCALE, ids=_ids(PAPER_SCALE))
def test_descriptions_state_the_loss_form(path: Path) -> None:
    text = _raw(path)["description"]
    assert "official" in text and ("form" in text), path.name


def test_backbones_follow_the_paper_settings(project: Path) -> None:
    """WRN-28-2 for CIFAR-10/SVHN and WRN-28-8 for CIFAR-100 (Table 1, the k sweep); the m figure's caption names
    WRN-28-2 for both datasets; the CNN-13 / Table 2 sweeps pair each dataset with the paper's two backbones."""
    expected = {"cifar10": {"wrn28_2"}, "svhn": {"wrn28_2"}, "cifar100": {"wrn28_8"}}
    for name in ("table1_cifar_svhn.yaml", "ablation_k.yaml"):
        spec = load_spec(EXPERIMENTS / name, project)
        for cell in expand_cells(spec):
            cfg = parse_config(trial_config(spec, cell, 0, project_dir=project))
            assert {cfg.model.backbone} == expected[cfg.data.dataset], (name, cell.id)
    pairs = {"table_cnn13_wrn.yaml": {("cifar10", "cnn13"), ("cifar10", "wrn28_2"), ("cifar100", "cnn13"),
                                      ("cifar100", "wrn28_8")},
             "table2_stl_mini_tiny.yaml": {("stl10", "resnet18"), ("stl10", "wrn37_2"),
                                           ("miniimagenet", "resnet18"), ("miniimagenet", "wrn28_8"),
                                           ("tinyimagenet", "resnet18"), ("tinyimagenet", "wrn28_8")},
             "ablation_m.yaml": {("cifar10", "wrn28_2"), ("cifar100", "wrn28_2")}}
    for name, want in pairs.items():
        spec = load_spec(EXPERIMENTS / name, project)
        got = set()
        for cell in expand_cells(spec):
            cfg = parse_config(trial_config(spec, cell, 0, project_dir=project))
            got.add((cfg.data.dataset, cfg.model.backbone))
        assert got == want, name


def test_table1_k_and_distribution_alignment(project: Path) -> None:
    """k = 0.6C is 6 on CIFAR-10/SVHN and 60 on CIFAR-100; MutexMatch with DA only at CIFAR-10 with 10 labels
    (footnote 1); CoMatch with DA in every cell (the caption: "Results of ReMixMatch and CoMatch are achieved by
    combining DA")."""
    from mutexmatch.config import resolve_k

    spec = load_spec(EXPERIMENTS / "table1_cifar_svhn.yaml", project)
    ks, da = {}, []
    for cell in expand_cells(spec):
        cfg = parse_config(trial_config(spec, cell, 0, project_dir=project))
        if cell.as_dict()["method"] == "mutexmatch-k0.6C":
            ks[cfg.data.dataset] = resolve_k(cfg.algorithm.k, 100 if cfg.data.dataset == "cifar100" else 10)
        if cfg.algorithm.dist_align:
            da.append((cell.as_dict()["method"], cfg.data.dataset, cfg.data.num_labels))
    assert ks == {"cifar10": 6, "cifar100": 60, "svhn": 6}
    assert [d for d in da if d[0] != "comatch"] == [("mutexmatch-da", "cifar10", 10)]
    assert len([d for d in da if d[0] == "comatch"]) == len(spec.axes["setting"]) == 9


@pytest.mark.parametrize("path", RUNS, ids=_ids(RUNS))
def test_single_run_configs_load(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths resolve against the current directory
    (tmp_path / "data").mkdir()
    data, overrides = _raw(path).get("data") or {}, []
    if data.get("dataset") == "imagefolder":   # its layout is checked: a small generated folder where it expects one
        write_fake_imagefolder(tmp_path / data["root"], num_classes=5, train_per_class=2, test_per_class=1, side=8)
        overrides = ["data.num_labels=5"]   # every image of the real folder labeled (transfer_cpu_pretrain.yaml)
    cfg = load_config(path, overrides)
    assert cfg.algorithm.name in ALGORITHMS
