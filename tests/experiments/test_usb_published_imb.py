"""USB's numbers in ``experiments/usb_classic_cv_imb.yaml`` are USB's ``results/classic_cv_imb.csv`` (issue 41 item 5).

``usb_classic_cv_imb_4499503.csv`` is that file as github.com/microsoft/Semi-supervised-learning stores it at commit
44995033c13f1831e572d2c4d470addc84e1aa3a ("[Update] Convert results to csv"; unchanged at HEAD
1ef4cbebcc0b368158315aeb425053858cf6c845), byte for byte (its UTF-8 byte-order mark kept):

    git --git-dir=<mirror of microsoft/Semi-supervised-learning> show 4499503:results/classic_cv_imb.csv

It holds accuracies, mean±std over 3 seeds, under three header rows (dataset; ``n_lb=lb<N_1>, n_ulb=ulb<M_1>``;
``r_lb=<γ_l>, r_ulb=<γ_u>``). Each YAML setting is matched to its CSV column by what the setting trains (its
dataset and ``data.imbalance``), not by its name; every cell the YAML prints is its CSV cell with two decimals, and
every CSV row with a number is printed: each row the sweep runs (a base, or a base + imbalance algorithm level that
runs that composition) as the published cells of its level (of its two levels for DASO, whose T_dist USB sets per
dataset: each level the cells it runs; none where USB's cell is empty, ReMixMatch + CoSSL at CIFAR-100 gamma 15),
the others (a composition this code cannot run) as quoted rows. A published cell and a quoted cell are checked
alike."""

from __future__ import annotations

import csv
import hashlib
import re
from decimal import Decimal
from pathlib import Path

import yaml

from mutexmatch.config import parse_config
from orchestration.spec.sweepfile import expand_cells, load_spec, trial_config

HERE = Path(__file__).resolve().parent
CSV = HERE / "usb_classic_cv_imb_4499503.csv"
YAML = HERE.parents[1] / "experiments" / "usb_classic_cv_imb.yaml"
SHA256 = "0fa6065ec96b8b639a389fce6b043674764223760c8f527305e52612ec131be0"
# USB's config/classic_cv_imb/<base>_<alg>/ keys at 4499503 (the wheel's get_argument defaults where its configs set
# none: adsh_tau_1, debiaspl_tau/_ema_p), in our names; epoch_steps = num_train_iter // epoch = 262144 // 256.
USB_IMB = {"abc": {"tau": 0.95, "lambda_abc": 1.0, "epoch_steps": 1024},
           "darp": {"warmup_epochs": 200, "alpha": 2.0, "num_refine_iter": 10, "iter_t": 10, "epoch_steps": 1024},
           "saw": {"epoch_steps": 1024}, "adsh": {"tau_1": 0.95, "epoch_steps": 1024},
           "debiaspl": {"form": "usb", "tau": 0.4, "ema_p": 0.999, "usb_ema_m": 0.999},
           "crest": {"num_gens": 6, "alpha": 3.0}, "crest+": {"num_gens": 6, "alpha": 3.0, "dist_align_t": 0.5},
           "daso": {"form": "usb", "queue_len": 256, "t_proto": 0.05, "interp_alpha": 0.5, "with_dist_aware": True,
                    "assign_loss_ratio": 1.0, "num_pl_dist_iter": 100, "num_pretrain_iter": 5120},
           "cossl": {"form": "usb", "max_lam": 0.6, "tfe_augment": "strong", "tfe_u_ratio": 1, "warm_epoch": 200,
                     "tfe_warm_epoch": 10, "tfe_warm_lr": 0.02, "tfe_warm_ema_decay": 0.999, "tfe_warm_wd": 5e-4,
                     "tfe_warm_bs": 64, "epoch_steps": 1024}}
# ... and the key that differs by dataset: daso_T_dist 1.5 on CIFAR-10, 0.3 on CIFAR-100 and STL-10
USB_IMB_PER_DATASET = {"daso": {"cifar10": {"t_dist": 1.5}, "cifar100": {"t_dist": 0.3}, "stl10": {"t_dist": 0.3}}}
CREST_GENERATION = 65536   # CReST's configs: num_train_iter 65536 (epoch 128) per generation, as USB runs it


def _csv_row(level: str) -> str:
    """The CSV row a method level or quoted row is named by (``crest+`` spelled ``crest_plus`` in a level; a DASO
    level run on CIFAR-100 and STL-10 with their T_dist is its base's DASO row)."""
    return level.replace("_plus", "+").removesuffix("_tdist0.3")


def _columns_and_rows() -> tuple[list[tuple], dict[str, list[str]]]:
    """The CSV's columns as (dataset, N_1, M_1 or None, γ_l, γ_u) and its rows, name -> cells."""
    datasets, sizes, ratios, *rows = list(csv.reader(CSV.read_text(encoding="utf-8-sig").splitlines()))
    columns = []
    for d, n, r in zip(datasets[1:], sizes[1:], ratios[1:]):
        lb, ulb = re.fullmatch(r"n_lb=lb(\d+), n_ulb=ulb(\d+|None)", n).groups()
        r_lb, r_ulb = re.fullmatch(r"r_lb=(-?[\d.]+), r_ulb=(-?[\d.]+)", r).groups()
        columns.append((d, int(lb), None if ulb == "None" else int(ulb), float(r_lb), float(r_ulb)))
    return columns, {row[0]: row[1:] for row in rows if row}


def _printed(cell: str) -> str:
    """A CSV cell as the YAML prints it: two decimals each side of ±; USB's None is the empty cell "-"."""
    if cell == "None":
        return "-"
    mean, std = cell.split("±")
    return f"{Decimal(mean):.2f}±{Decimal(std):.2f}"


def _setting_column(level: dict, columns: list[tuple]) -> int:
    """The CSV column of a setting level, from the dataset and long-tailed split it trains."""
    data = level["data"]
    imb = data["imbalance"]
    key = (data["dataset"], imb["labeled_head"], imb.get("unlabeled_head"), float(imb["labeled_ratio"]),
           float(imb.get("unlabeled_ratio", 1.0)))
    assert columns.count(key) == 1, key
    return columns.index(key)


def test_the_csv_copy_is_usbs_file_byte_for_byte() -> None:
    assert hashlib.sha256(CSV.read_bytes()).hexdigest() == SHA256


def test_every_printed_usb_cell_is_its_csv_cell_and_every_csv_number_is_printed(tmp_path: Path) -> None:
    raw = yaml.safe_load(YAML.read_text())
    columns, usb = _columns_and_rows()
    settings = raw["axes"]["setting"]
    column_of = {name: _setting_column(level, columns) for name, level in settings.items()}
    assert sorted(column_of.values()) == list(range(len(columns))) == list(range(11))   # USB's 11 settings, once
    table = raw["tables"][0]
    quoted = {q["level"]: q["values"] for q in table["quoted_rows"]}
    assert not set(quoted) & set(table["published"])   # each number printed once
    printed = {**table["published"], **quoted}
    wrong = [(row, setting, value, _printed(usb[_csv_row(row)][column_of[setting]]))
             for row, cells in printed.items() for setting, value in cells.items()
             if value != _printed(usb[_csv_row(row)][column_of[setting]])]
    assert not wrong, f"(row, setting, printed, USB's CSV cell): {wrong}"
    (tmp_path / "data").mkdir()
    runs: dict[str, set[str]] = {}
    for cell in expand_cells(load_spec(YAML, tmp_path)):
        runs.setdefault(cell.as_dict()["method"], set()).add(cell.as_dict()["setting"])
    numbered = {row: {s for s in settings if usb[_csv_row(row)][column_of[s]] != "None"} for row in runs}
    # a run row: the cells it runs, but where USB has no number (its "-": no published cell)
    assert {row: set(cells) for row, cells in table["published"].items()} == {
        row: ran & numbered[row] for row, ran in runs.items()}
    assert all(set(cells) == set(settings) for cells in quoted.values())   # every column, "-" where USB has none
    by_csv_row: dict[str, list[str]] = {}
    for row, cells in printed.items():
        by_csv_row.setdefault(_csv_row(row), []).extend(cells)
    # each CSV row's cells printed once, over its levels (DASO: one level per T_dist) or its quoted row
    assert all(len(cells) == len(set(cells)) for cells in by_csv_row.values()), by_csv_row
    assert all({s for s in settings if usb[row][column_of[s]] != "None"} <= set(cells)
               for row, cells in by_csv_row.items()), by_csv_row
    with_a_number = {name for name, cells in usb.items() if any(c != "None" for c in cells)}
    assert set(by_csv_row) == with_a_number
    assert "remixmatch_adsh" not in with_a_number and "fixmatch_crest+" in with_a_number
    assert "remixmatch_cossl" in runs and "c100-lb150-r15" not in table["published"]["remixmatch_cossl"]


def test_each_run_row_runs_the_csv_row_its_numbers_come_from(tmp_path: Path) -> None:
    """A method level trains the composition of the CSV row its published cells come from (base, or base + imbalance
    algorithm, both named by the level), in every setting."""
    (tmp_path / "data").mkdir()
    spec = load_spec(YAML, tmp_path)
    ran = {}
    for cell in expand_cells(spec):
        cfg = parse_config(trial_config(spec, cell, 0, project_dir=tmp_path))
        imb = cfg.imb_algorithm
        ran.setdefault(cell.as_dict()["method"], set()).add(
            cfg.algorithm.name + ("" if imb is None else f"_{imb.name}"))
    assert {level: {_csv_row(level)} for level in ran} == ran
    # the bases and the 15 compositions USB publishes that compose here (issue 41 item 5), DASO's two levels each
    assert len(ran) == 3 + 15 + 2 and len({_csv_row(level) for level in ran}) == 3 + 15


def test_the_runs_use_usbs_classic_cv_imb_settings(tmp_path: Path) -> None:
    """scripts/config_generator_classic_cv_imb.py: WRN-28-2 everywhere, B 64, FixMatch uratio 2, ReMixMatch 1 with
    uniform alignment, 256 epochs of 1024 steps evaluated every 1024, EMA 0.999, SGD 0.03 Nesterov cosine 7/16, weight
    decay 5e-4 on every dataset, labeled images not in the unlabeled set, three folds (USB's seeds 0-2)."""
    (tmp_path / "data").mkdir()
    spec = load_spec(YAML, tmp_path)
    assert spec.folds == [0, 1, 2]
    cells = expand_cells(spec)
    assert len(cells) == 16 * 11 + 2 * 11   # DASO: two levels per base, each on its own datasets
    for cell in cells:
        cfg = parse_config(trial_config(spec, cell, 0, project_dir=tmp_path))
        where = cell.id
        assert cfg.model.backbone == "wrn28_2", where
        imb = None if cfg.imb_algorithm is None else cfg.imb_algorithm.model_dump()
        generations = imb["num_gens"] if imb and imb["name"] in ("crest", "crest+") else None
        iterations = 256 * 1024 if generations is None else generations * CREST_GENERATION   # all generations
        assert (cfg.train.iterations, cfg.train.eval_interval, cfg.train.ema, cfg.train.batch_size) == (
            iterations, 1024, 0.999, 64), where
        if imb is not None:
            usb = {**USB_IMB[imb["name"]], **USB_IMB_PER_DATASET.get(imb["name"], {}).get(cfg.data.dataset, {})}
            assert {k: imb[k] for k in usb} == usb, where
        assert cfg.train.mu == {"fixmatch": 2, "remixmatch": 1}.get(cfg.algorithm.name, cfg.train.mu), where
        assert (cfg.optim.lr, cfg.optim.momentum, cfg.optim.nesterov, cfg.optim.schedule, cfg.optim.cosine_factor,
                cfg.optim.weight_decay) == (0.03, 0.9, True, "cosine", 7 / 16, 5e-4), where
        assert cfg.data.unlabeled_includes_labeled is False and cfg.data.imbalance is not None, where
        if cfg.algorithm.name == "fixmatch":
            assert (cfg.algorithm.tau, cfg.algorithm.lambda_p) == (0.95, 1.0), where
        if cfg.algorithm.name == "remixmatch":
            assert (cfg.algorithm.da_target, cfg.algorithm.lambda_p, cfg.algorithm.unsup_warm_up) == (
                "uniform", 1.5, 0.015625), where

