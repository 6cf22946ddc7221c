"""Every registered imbalance algorithm (issue 41 item 3), parametrised over the registry so a new module is covered
without touching this file: its config section (defaults, documented fields, unknown keys refused), the bases it
allows and the one-line refusal of the others before any work, the config hash it joins, its docs row, its terms
(declared, logged), its state in checkpoints (a stopped and resumed run is bit-identical), the head evaluated, and
no host synchronisation in its step (the meta device)."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from mutexmatch.algorithms import ALGORITHMS, TrainContext
from mutexmatch.config import ConfigError, config_hash, config_markdown, parse_config
from mutexmatch.imb_algorithms import (IMB_ALGORITHMS, SECTION, algorithm_class, base_errors, compose,
                                       declared_terms)
from mutexmatch.models import build_model
from mutexmatch.training import Trainer
from mutexmatch.training.extended_step import features_forward, step_inputs

IMB = sorted(IMB_ALGORITHMS)
COMPOSED = [(imb, base) for imb in IMB for base in IMB_ALGORITHMS[imb].bases]


def _raw(base: str, imb: dict | None, tmp_path=None, name: str = "run", iterations: int = 6) -> dict:
    raw = {"data": {"dataset": "digits", "num_labels": 20, "fold": 1}, "model": {"backbone": "small_cnn"},
           "algorithm": {"name": base},
           "train": {"iterations": iterations, "eval_interval": 2, "batch_size": 4, "mu": 2, "num_threads": 1,
                     "progress": False, "keep_checkpoints": 10}}
    if imb is not None:
        raw["imb_algorithm"] = imb
    if tmp_path is not None:
        raw["output_dir"] = str(tmp_path / name)
    return raw


def test_the_registry_holds_abc():
    assert "abc" in IMB_ALGORITHMS and IMB_ALGORITHMS["abc"].evaluated_head == "abc"


@pytest.mark.parametrize("imb", IMB)
def test_section_resolves_defaults_and_refuses_unknown_keys(imb):
    cls = IMB_ALGORITHMS[imb]
    cfg = parse_config(_raw(cls.bases[0], {"name": imb}))
    fields = cls.imb_params_model.model_fields
    assert cfg.to_dict()["imb_algorithm"] == {"name": imb, **{n: f.default for n, f in fields.items()}}
    assert all(f.description for f in fields.values()), "every parameter is documented"
    with pytest.raises(ConfigError) as err:
        parse_config(_raw(cls.bases[0], {"name": imb, "no_such_key": 1}))
    assert str(err.value).count("\n") == 0 and "imb_algorithm.no_such_key=1" in str(err.value)


@pytest.mark.parametrize("imb", IMB)
@pytest.mark.parametrize("base", sorted(ALGORITHMS))
def test_bases_allowed_and_others_refused_in_one_line(imb, base):
    allowed = IMB_ALGORITHMS[imb].bases
    errors = base_errors(imb, base)
    if base in allowed:
        assert errors == [] and issubclass(compose(imb, base, {}), ALGORITHMS[base])
    else:
        assert len(errors) == 1 and f"algorithm.name='{base}'" in errors[0]
        assert all(a in errors[0] for a in allowed)


@pytest.mark.parametrize("imb", IMB)
def test_a_refused_base_is_a_config_error(imb):
    refused = next(b for b in ("mutexmatch", "supervised", "meanteacher") if b not in IMB_ALGORITHMS[imb].bases)
    with pytest.raises(ConfigError) as err:
        parse_config(_raw(refused, {"name": imb}))
    assert str(err.value).startswith(f"algorithm.name='{refused}': imbalance algorithm '{imb}' composes with")


@pytest.mark.parametrize("imb", IMB)
def test_the_section_joins_the_hash_and_the_base_keeps_its_own(imb):
    base = IMB_ALGORITHMS[imb].bases[0]
    plain = parse_config(_raw(base, None))
    assert "imb_algorithm" not in plain.to_dict()          # absent: every earlier config keeps its hash
    composed = parse_config(_raw(base, {"name": imb}))
    assert config_hash(composed) != config_hash(plain)
    name, field = next(iter(IMB_ALGORITHMS[imb].imb_params_model.model_fields.items()))
    other = field.default / 2 if isinstance(field.default, float) else field.default
    if other != field.default:
        assert config_hash(parse_config(_raw(base, {"name": imb, name: other}))) != config_hash(composed)


@pytest.mark.parametrize("imb", IMB)
def test_docs_and_terms(imb):
    cls = IMB_ALGORITHMS[imb]
    assert f"| `{imb}` |" in config_markdown()
    assert set(cls.imb_terms) <= declared_terms()


@pytest.mark.parametrize("imb,base", COMPOSED)
def test_step_reads_nothing_from_the_device(imb, base):
    cls = compose(imb, base, {})
    ctx = dataclasses.replace(TrainContext.synthetic(10, 16, num_labeled_per_class=2), device=torch.device("meta"))
    alg = cls({}, ctx)
    model = build_model("small_cnn", num_classes=10, in_channels=1, image_size=8, with_tnc=cls.uses_tnc)
    model.add_heads(cls.heads(alg.params, model.feat_dim, 10))
    model = model.to("meta")
    x = torch.zeros(sum(cls.step.rows(4, 8)), 1, 8, 8, device="meta")
    rot = torch.zeros(8, dtype=torch.long, device="meta") if "rotated" in cls.step.views else None
    inp = step_inputs(cls.step, x, num_lb=4, num_ulb=8, features=features_forward(model, model), teacher=None,
                      step=0, rot_label=rot, targets_lb=torch.zeros(4, dtype=torch.long, device="meta"),
                      ulb_idx=torch.arange(8, device="meta"))
    out = alg.compute(model, inp)
    out.loss.backward()
    assert set(out.terms) == set(cls.terms) and set(cls.imb_terms) <= set(out.terms)


def _tensors(trainer: Trainer) -> dict[str, torch.Tensor]:
    out = {f"model.{k}": v for k, v in trainer.model.state_dict().items()}
    out.update({f"ema.{k}": v for k, v in trainer.ema.state_dict().items()})
    return out


@pytest.mark.parametrize("imb,base", COMPOSED)
def test_run_logs_its_terms_evaluates_its_head_and_resumes_bit_identical(tmp_path, imb, base):
    cls = IMB_ALGORITHMS[imb]
    raw = _raw(base, {"name": imb}, tmp_path, "full")
    full = Trainer(parse_config(raw))
    full.fit()
    half = Trainer(parse_config(_raw(base, {"name": imb}, tmp_path, "half")))
    half.fit(stop_at=4)
    resumed = Trainer(parse_config(_raw(base, {"name": imb}, tmp_path, "half")), resume=True)
    assert resumed.step == 4
    resumed.fit()
    a, b = _tensors(full), _tensors(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert type(full.algorithm) is algorithm_class(full.cfg) and full.algorithm.state_dict().keys() >= {SECTION}
    lines = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    assert all(f"train/{t}" in lines[-1] for t in cls.imb_terms)
    ema = full.ema.module
    assert ema.evaluated_head == cls.evaluated_head
    x = torch.rand(3, 1, 16, 16)
    head = ema.tpc if cls.evaluated_head is None else ema.heads[cls.evaluated_head]
    assert torch.equal(ema.forward_tpc(x), head(ema(x)))


def test_register_refuses_a_taken_name_a_wrong_parameter_model_and_unknown_bases():
    from mutexmatch.imb_algorithms import ImbAlgorithm, register_imb_algorithm

    with pytest.raises(ValueError, match=r"^imb_algorithm\.name='abc': already registered by ABC$"):
        register_imb_algorithm("abc")(type("X", (ImbAlgorithm,), {}))
    with pytest.raises(ValueError, match=r"^Y\.imb_params_model: must be an ImbParams model$"):
        register_imb_algorithm("y_imb")(type("Y", (ImbAlgorithm,), {"imb_params_model": dict}))
    with pytest.raises(ValueError, match=r"^Z\.terms: 'Bad' is not a term name.*\n"
                                         r"Z\.bases: 'nope' is not a registered algorithm$"):
        register_imb_algorithm("z_imb")(type("Z", (ImbAlgorithm,), {"imb_terms": ("Bad",),
                                                                      "bases": ("fixmatch", "nope")}))
    assert not {"y_imb", "z_imb"} & set(IMB_ALGORITHMS)
