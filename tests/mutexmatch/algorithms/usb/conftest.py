"""The USB reference harness: our algorithms and USB's (``semilearn``, the version pinned by ``make usb-reference``)
run in lockstep, step for step, on the same weights and the same views.

semilearn is a test-time reference only. It imports about eleven heavy optional modules it never uses in a
``train_step``; :func:`import_semilearn` stubs them (after torch and torchvision are imported, so torch's own
lazy imports never see a stub) and removes the stubs from ``sys.modules`` again, so the rest of the test session
sees the real modules or none. USB algorithm objects are built by :func:`build_usb`: ``AlgorithmBase.__init__``
(datasets, loaders, nets, optimiser) is swapped for one that sets only the fields a ``train_step`` reads, and
``Tensor.cuda`` is a no-op while USB runs, so everything stays on the CPU.

A test describes one algorithm by a small adapter object (duck-typed; ``test_fixmatch_lockstep.py`` is the
smallest) and calls the ``usb_lockstep`` fixture with it, which checks every step and returns the steps' records
for further assertions (a deliberate deviation from USB is asserted there). The adapter has:

- ``name`` (ours, in the registry) and ``usb_name`` (USB's registry name);
- ``ours_params`` (our ``algorithm.*`` values) and ``usb_args`` (USB's argument names; the rest take USB's own
  ``get_argument`` defaults; ``ulb_loss_ratio`` is lambda_u);
- ``terms``: our term name -> USB's ``train_step`` log key (``train/sup_loss``, ``train/unsup_loss``, ...);
- ``logit_scale``: multiplies the logits so the masks are neither all 0 nor all 1 (checked every step, or in
  ``min_mixed`` steps when the adapter sets that, saying why);
- ``state(ours, usb)``: name -> (our tensor, USB's tensor) of the algorithm state to compare after every step
  (USB's hooks are ``usb.hooks_dict["MaskingHook"]`` etc.);
- optionally ``prepare(ours, usb, generator)``: puts both sides in the same mid-run state before the first step
  (so thresholds that only move slowly from their start are exercised);
- where USB's pseudo-labelling hook returns soft targets (UDA, Dash), they are compared with our
  ``StepOutput.soft_target`` and their argmax with our ``pseudo_label``;
- optionally any :class:`Lockstep` field (``steps``, ``ulb_size``, ``num_classes``, ``lr``, ``batchnorm``: a
  BatchNorm2d in the backbone whose running statistics are compared every step, ``second_strong``: a view
  ``x_ulb_s_1`` drawn after the others, USB's ``x_ulb_s_1``; ``x_ulb_s_0`` is the first strong view;
  ``image_views``: views shaped (N, 1, 1, d_in) like images; ``labeled_strong``: a strong view ``x_lb_s`` of
  the labeled batch, drawn last);
- optionally ``after_sgd(ours, usb)``: called after both SGD updates of a step (Mean Teacher's EMA updates);
  ``before_usb_step(usb)``: before USB's step (its ``before_train_step`` hooks: DebiasPL's sets the loss's prior);
- USB algorithms without a mask or pseudo-labels (Pi-Model, Mean Teacher, VAT): ours must return no mask, and our
  pseudo-labels (diagnostics) are not compared; set ``min_mixed = 0``;
- for an extended step (extra heads, views, separate forwards): ``models(ours_tiny, usb_backbone)`` returning (our
  model, USB's model, our state name -> USB's) -- e.g. a head attached to ours and USB's ``CoMatch_Net`` around
  ``usb_backbone`` (a :class:`UsbNet`, which answers ``only_feat`` / ``only_fc``); the driver copies our weights
  into USB's by those names, compares gradients, weights and buffers by them; ``our_step(alg, model, views, step)``
  making our step from the views (:func:`separate_step` for a separate-forward step); ``usb_targets(record)`` where USB's pseudo-labels are not what a
  ``gen_ulb_targets`` hook returns (every hook's keyword arguments are recorded as ``<hook>.kwargs``, every call's
  result in order as ``<hook>.calls``) and ``usb_mask(record)`` where USB's unlabeled mask is not the last
  ``masking`` call's (DeFixMatch masks its labeled batch after it);
- USB's ``x_ulb_rot`` (CRMatch) is the ``rotated`` view ``x_ulb_s_0_rot``; :class:`UsbNet` answers ``extract`` too;
- an imbalance algorithm composed with the base (issue 41): ``imb_name`` / ``imb_params`` (ours,
  :func:`mutexmatch.imb_algorithms.compose`) and ``usb_imb_name`` (USB's ``IMB_ALGORITHMS``: both sides are then
  ``class (Imb, Base)`` as USB's ``get_imb_algorithm`` makes it; its own arguments in ``usb_args`` too), and
  ``wrap(ours_net, usb_alg, names)`` returning USB's model after its ``__init__`` wrapped it (ABC's ``ABCNet``) and
  the names; the ``Lockstep`` field ``lb_counts`` makes the labeled pool long-tailed on both sides.

USB's epoch advances as its training loop advances it (``it // num_iter_per_epoch``; ``usb_args`` ``epoch`` sets
how many steps an epoch has: ``total_steps // epoch``). Ours gets the trainer's context: ``steps_per_epoch`` is one
pass over the unlabeled pool (``ceil(ulb_size / (batch mu))``), never USB's epoch, so an algorithm whose schedule
switches at an epoch boundary must find USB's epoch itself (its ``epoch_steps``, issue 32). To compare such a switch
at a real run's epoch length, an adapter sets ``total_steps`` (USB's num_train_iter, 2^20 in classic CV) with
``epoch`` 1024 and ``first_step`` just before the boundary: both sides then start at that iteration.

Where we deviate from USB on purpose, the ``usb_side_by_side`` fixture runs both sides on the same fixed weights and
the same views, step after step, and compares nothing: the test asserts the deviation (and what still agrees) from
the records it returns.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import re
import sys
import types
from argparse import Namespace
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from mutexmatch.algorithms import Algorithm, StepInputs, StepOutput, TrainContext, build_algorithm
from mutexmatch.training.extended_step import features_forward, step_inputs, teacher_forward

MAKEFILE = Path(__file__).resolve().parents[4] / "Makefile"
# The modules semilearn imports at package import but no train_step uses.
STUBBED = ("tqdm", "skimage.util", "torchaudio", "timm.models.layers", "transformers", "ruamel.yaml", "wandb", "aim",
           "sklearn.metrics", "progress.bar", "torch.utils.tensorboard")


def pinned_version() -> str:
    """The semilearn version ``make usb-reference`` installs (the pin lives in the Makefile only)."""
    found = re.search(r"semilearn==([0-9][0-9.]*)", MAKEFILE.read_text())
    assert found, f"{MAKEFILE}: no semilearn==<version> pin in the usb-reference target"
    return found.group(1)


class _Anything:
    """Stands for any class or function of a stubbed module (callable, subclassable, any attribute)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> "_Anything":
        return _Anything()

    def __getattr__(self, name: str) -> "_Anything":
        return _Anything()


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything


@contextlib.contextmanager
def _stubbed_modules(names: tuple[str, ...]):
    """``sys.modules`` entries (and parent attributes) for ``names`` and their packages, restored on exit."""
    saved: dict[str, Any] = {}
    attrs: list[tuple[types.ModuleType, str, Any]] = []
    for full in names:
        parts = full.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name in saved or (i < len(parts) and name in ("torch", "torch.utils")):
                continue
            saved[name] = sys.modules.get(name)
            stub = _StubModule(name)
            stub.__path__, stub.__spec__ = [], importlib.machinery.ModuleSpec(name, None, is_package=True)
            sys.modules[name] = stub
            parent = sys.modules.get(".".join(parts[:i - 1])) if i > 1 else None
            if parent is not None and not isinstance(parent, _StubModule):
                attrs.append((parent, parts[i - 1], getattr(parent, parts[i - 1], None)))
                setattr(parent, parts[i - 1], stub)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        for parent, attr, old in attrs:
            if old is None:
                delattr(parent, attr)
            else:
                setattr(parent, attr, old)


def import_semilearn() -> types.ModuleType:
    """``semilearn.core`` (``AlgorithmBase``; importing it registers every algorithm), imported once behind the
    stubs."""
    if "semilearn.core" in sys.modules:
        return sys.modules["semilearn.core"]
    import torchvision.models  # noqa: F401  (imports torch._dynamo, which probes optional modules, before the stubs)
    with _stubbed_modules(STUBBED):
        return importlib.import_module("semilearn.core")


# ----------------------------------------------------------------------------------------------------------------------
# A tiny model both sides share the weights of.
# ----------------------------------------------------------------------------------------------------------------------
class TinyNet(nn.Module):
    """Backbone (Linear [+ BatchNorm] + tanh) and a linear TPC whose logits are multiplied by ``scale``: the adapter's
    knob that puts the confidences around its threshold, so masks are neither all 0 nor all 1. With ``batchnorm`` the
    backbone has a BatchNorm2d (on (N, width, 1, 1): USB's ``bn_controller`` handles 2-d BatchNorm only), whose
    running statistics the driver compares with the weights."""

    def __init__(self, d_in: int, width: int, num_classes: int, scale: float, batchnorm: bool = False) -> None:
        super().__init__()
        self.body, self.head, self.scale = nn.Linear(d_in, width), nn.Linear(width, num_classes), scale
        self.bn = nn.BatchNorm2d(width) if batchnorm else None

    def forward(self, x: Tensor) -> Tensor:
        h = self.body(x.flatten(1))     # image-shaped views (N, 1, 1, d_in): the adapter's ``image_views``
        return torch.tanh(h if self.bn is None else self.bn(h[:, :, None, None]).flatten(1))

    def tpc(self, feats: Tensor) -> Tensor:
        return self.scale * self.head(feats)


class UsbNet(nn.Module):
    """USB's model interface over a :class:`TinyNet`: ``{'logits', 'feat'}``, or the features / the TPC alone
    (``only_feat`` / ``only_fc``, what USB's wrappers such as ``CoMatch_Net`` call), ``num_features``."""

    def __init__(self, net: TinyNet) -> None:
        super().__init__()
        self.net, self.num_features = net, net.head.in_features

    def forward(self, x: Tensor, only_feat: bool = False, only_fc: bool = False, **kwargs: Any) -> Any:
        if only_fc:
            return self.net.tpc(x)
        feat = self.net(x)
        return feat if only_feat else {"logits": self.net.tpc(feat), "feat": feat}

    def extract(self, x: Tensor) -> Tensor:
        """The backbone's features (what USB's ``CRMatch_Net`` reads for a non-convolutional net)."""
        return self.net(x)


def attach_aux_head(adapter: Any, ours_net: nn.Module, usb: Any, names: dict[str, str], head: str) -> dict[str, str]:
    """For an adapter's ``wrap``: our imbalance algorithm's heads attached to ``ours_net`` (as the trainer attaches
    them) and USB's model as its ``__init__`` wrapped it (ABCNet, TRASNet: ``backbone`` + ``aux_classifier``), whose
    ``model.module`` is itself (what USB's train_step reads: DDP's); returns the names, ours ``heads.<head>.*`` ->
    ``aux_classifier.*`` and the rest under ``backbone.``."""
    from mutexmatch.imb_algorithms import compose
    cls = compose(adapter.imb_name, adapter.name, adapter.imb_params)
    if not hasattr(ours_net, "heads"):
        ours_net.heads = nn.ModuleDict()
    ours_net.heads.update(cls.imb_heads(cls.imb_params, usb.model.num_features, usb.num_classes))
    object.__setattr__(usb.model, "module", usb.model)
    names = {n: f"backbone.{u}" for n, u in names.items() if not n.startswith(f"heads.{head}.")}
    names.update({f"heads.{head}.{w}": f"aux_classifier.{w}" for w in ("weight", "bias")})
    return names


# ----------------------------------------------------------------------------------------------------------------------
# Building both sides.
# ----------------------------------------------------------------------------------------------------------------------
def usb_defaults(cls: type) -> dict[str, Any]:
    """An algorithm's own argument defaults (its ``get_argument``), by name."""
    return {a.name.lstrip("-"): a.default for a in cls.get_argument()}


def _light_base_init(self: Any, args: Namespace, net_builder: Any = None, tb_log: Any = None, logger: Any = None,
                     **kwargs: Any) -> None:
    """``AlgorithmBase.__init__`` without datasets, loaders, nets or optimiser: the fields a train_step reads."""
    from semilearn.core.criterions import CELoss, ConsistencyLoss
    from semilearn.core.utils import Bn_Controller
    self.args, self.num_classes, self.lambda_u = args, args.num_classes, args.ulb_loss_ratio
    self.epochs, self.num_train_iter, self.ema_m = args.epoch, args.num_train_iter, args.ema_m
    self.num_iter_per_epoch = int(self.num_train_iter // self.epochs)
    self.use_cat, self.use_amp, self.amp_cm = True, False, contextlib.nullcontext
    self.gpu, self.rank, self.distributed, self.world_size = None, 0, False, 1
    self.it, self.epoch, self.print_fn, self.algorithm = 0, 0, lambda *a, **k: None, args.algorithm
    self.model = self.ema_model = net_builder
    self.ce_loss, self.consistency_loss = CELoss(), ConsistencyLoss()
    self.bn_controller = Bn_Controller()     # Pseudo-Label, Pi-Model, ...: BN statistics kept out of a forward
    # ReMixMatch's alignment target, ABC's class weights: the labeled pool's classes, as Data draws them
    # (arange(lb_size) % C, or lb_counts' classes)
    targets = getattr(args, "lb_targets", None) or [i % args.num_classes for i in range(args.lb_dest_len)]
    self.dataset_dict = {"train_lb": Namespace(targets=targets),
                         "train_ulb": range(args.ulb_dest_len)}   # its length: DARP, SAW read it
    self._hooks, self.hooks_dict = [], OrderedDict()
    self.set_hooks()


def build_usb(name: str, model: nn.Module, args: dict[str, Any], *, num_classes: int, ulb_size: int,
              lb_size: int, total_steps: int, imb: str | None = None, lb_targets: list[int] | None = None) -> Any:
    """USB's algorithm ``name`` on ``model`` (a :class:`UsbNet`), its arguments = its defaults updated by ``args``
    (``ulb_loss_ratio`` is lambda_u), run through the algorithm's own ``__init__`` over the light base; with
    ``imb`` the imbalance algorithm composed in as USB's ``get_imb_algorithm`` does (its optimiser not built)."""
    core = import_semilearn()
    registry = core.utils.ALGORITHMS
    assert name in registry, f"USB has no algorithm {name!r} (it printed why an import failed); it has {list(registry.keys())}"
    cls = registry[name]
    defaults = usb_defaults(cls)
    if imb is not None:
        import semilearn.imb_algorithms  # noqa: F401  (registers USB's imbalance algorithms)
        imb_cls = core.utils.IMB_ALGORITHMS[imb]
        # USB's DummyClass; no optimiser (the driver steps both sides), no imbalance ratios a train_step reads
        cls = type(f"{imb_cls.__name__}{cls.__name__}", (imb_cls, cls), {"set_optimizer": lambda self: (None, None)})
        defaults = {**defaults, **usb_defaults(imb_cls), "imb_algorithm": imb, "lb_imb_ratio": None,
                    "ulb_imb_ratio": None}
    full = {"algorithm": name, "num_classes": num_classes, "ulb_loss_ratio": 1.0, "epoch": 1,
            "num_train_iter": total_steps, "ulb_dest_len": ulb_size, "lb_dest_len": lb_size, "use_wandb": False,
            "use_aim": False, "gpu": None, "lb_targets": lb_targets, "ema_m": 0.999, **defaults, **args}
    with mock.patch.object(core.AlgorithmBase, "__init__", _light_base_init), \
            mock.patch.object(Tensor, "cuda", lambda t, *a, **k: t):   # memory banks made with .cuda(gpu)
        # by keyword, as USB's get_imb_algorithm calls DummyClass (DebiasPL's __init__ takes args, **kwargs)
        alg = cls(Namespace(**full), model) if imb is None else cls(args=Namespace(**full), net_builder=model)
    return alg


def build_ours(name: str, params: dict[str, Any], *, num_classes: int, ulb_size: int, lb_size: int, total_steps: int,
               steps_per_epoch: int, imb: tuple[str, dict[str, Any]] | None = None,
               lb_counts: tuple[int, ...] | None = None) -> Algorithm:
    """Our algorithm through the public surface (the one place to follow the trainer's seam); the schedule is
    USB's: ``total_steps`` = its num_train_iter, ``steps_per_epoch`` = its num_iter_per_epoch; the labeled set is
    the pool's ``lb_size`` images, balanced (as Data draws them) or ``lb_counts`` a class; ``imb``: (name,
    parameters) of an imbalance algorithm composed in."""
    ctx = TrainContext.synthetic(num_classes, ulb_size, num_labeled_per_class=lb_size // num_classes,
                                 total_steps=total_steps, steps_per_epoch=steps_per_epoch)
    if lb_counts is not None:
        ctx = dataclasses.replace(ctx, labeled=torch.arange(sum(lb_counts)), labeled_counts=torch.tensor(lb_counts))
    if imb is None:
        return build_algorithm(name, params, ctx)
    from mutexmatch.imb_algorithms import compose
    return compose(imb[0], name, imb[1])(params, ctx)


# ----------------------------------------------------------------------------------------------------------------------
# The driver.
# ----------------------------------------------------------------------------------------------------------------------
@dataclass
class Views:
    """One step's inputs, shared by both sides."""

    x_lb: Tensor
    y_lb: Tensor
    idx_lb: Tensor                      # positions in the labeled pool (SimMatch's bank index)
    idx_ulb: Tensor
    x_ulb_w: Tensor
    x_ulb_s: Tensor
    x_ulb_s_1: Tensor | None = None     # a second strong view (adapters with ``second_strong``)
    x_ulb_s_0_rot: Tensor | None = None  # a "rotated" view and its labels 0..3 (adapters with ``rotated``: the
    rot_v: Tensor | None = None          # step's arithmetic is compared, the geometry is tested elsewhere)
    x_lb_s: Tensor | None = None        # a strong view of the labeled batch (adapters with ``labeled_strong``)
    x_ulb_m: Tensor | None = None       # a medium view of the unlabeled batch (adapters with ``medium``)

    def usb_args(self) -> dict[str, Tensor]:
        """By USB's ``train_step`` argument names (``x_ulb_s_0`` is the first strong view)."""
        return {"x_lb": self.x_lb, "y_lb": self.y_lb, "idx_lb": self.idx_lb, "idx_ulb": self.idx_ulb,
                "x_ulb_w": self.x_ulb_w, "x_ulb_s": self.x_ulb_s, "x_ulb_s_0": self.x_ulb_s, "x_ulb_s_1": self.x_ulb_s_1,
                "x_ulb_s_0_rot": self.x_ulb_s_0_rot, "x_ulb_rot": self.x_ulb_s_0_rot, "rot_v": self.rot_v,
                "x_lb_s": self.x_lb_s, "x_ulb_m": self.x_ulb_m}


# Our StepSpec view -> the Views field that feeds it (USB's MixMatch gets its second weak view as x_ulb_s).
VIEW_SOURCE = {"lb": "x_lb", "lb_strong": "x_lb_s", "medium": "x_ulb_m", "weak": "x_ulb_w", "strong": "x_ulb_s", "weak2": "x_ulb_s", "strong2": "x_ulb_s_1",
               "rotated": "x_ulb_s_0_rot"}


@dataclass
class Record:
    """One lockstep step: our output, USB's loss, its log and what its hooks returned (by hook function name:
    ``masking``, ``gen_ulb_targets``, ``dist_align``)."""

    ours: StepOutput
    usb_loss: Tensor
    usb_log: dict[str, float]
    usb_hooks: dict[str, Any] = field(default_factory=dict)


class Data:
    """Gaussian class clusters: a labeled pool, an unlabeled pool (indices 0..N-1 on both sides) and noisy views."""

    def __init__(self, cfg: Any, seed: int) -> None:
        self.g = torch.Generator().manual_seed(seed)
        self.cfg = cfg
        self.means = 2.0 * torch.randn(cfg.num_classes, cfg.d_in, generator=self.g)
        self.y_lb_pool = (torch.arange(cfg.lb_size) % cfg.num_classes if cfg.lb_counts is None else
                          torch.repeat_interleave(torch.arange(cfg.num_classes), torch.tensor(cfg.lb_counts)))
        self.x_lb_pool = self._points(self.y_lb_pool)
        self.x_ulb_pool = self._points(torch.randint(cfg.num_classes, (cfg.ulb_size,), generator=self.g))

    def _points(self, y: Tensor) -> Tensor:
        return self.means[y] + torch.randn(len(y), self.cfg.d_in, generator=self.g)

    def _noisy(self, x: Tensor, sigma: float) -> Tensor:
        return x + sigma * torch.randn(x.shape, generator=self.g)

    def next(self) -> Views:
        c = self.cfg
        lb = torch.randperm(c.lb_size, generator=self.g)[:c.batch]
        ulb = torch.randperm(c.ulb_size, generator=self.g)[:c.mu * c.batch]
        x_u = self.x_ulb_pool[ulb]
        v = Views(self._noisy(self.x_lb_pool[lb], 0.1), self.y_lb_pool[lb], lb, ulb, self._noisy(x_u, 0.1),
                  self._noisy(x_u, 0.6))
        if c.second_strong:   # drawn last: the other views are those of the adapters without it
            v.x_ulb_s_1 = self._noisy(x_u, 0.6)
        if c.rotated:
            v.x_ulb_s_0_rot = self._noisy(x_u, 0.6)
            v.rot_v = torch.randint(4, (len(ulb),), generator=self.g)
        if c.labeled_strong:   # drawn last too: DeFixMatch's x_lb_s
            v.x_lb_s = self._noisy(self.x_lb_pool[lb], 0.6)
        if c.medium:   # drawn last too: SequenceMatch's x_ulb_m, between the weak and the strong view's noise
            v.x_ulb_m = self._noisy(x_u, 0.35)
        if c.image_views:     # (N, 1, 1, d_in): what USB's per-image operations (VAT's L2 norms) expect
            for name in ("x_lb", "x_ulb_w", "x_ulb_s", "x_ulb_s_1", "x_ulb_s_0_rot", "x_lb_s"):
                if getattr(v, name) is not None:
                    setattr(v, name, getattr(v, name)[:, None, None, :])
        return v


def _usb_step(alg: Any, v: Views, seed: int) -> tuple[Tensor, dict[str, float], dict[str, Any]]:
    """USB's train_step on ``v`` (its own argument subset), recording what its named hooks return."""
    hooks: dict[str, Any] = {}
    call_hook = type(alg).call_hook

    def recording(self: Any, fn_name: str, hook_name: str | None = None, *args: Any, **kwargs: Any) -> Any:
        result = call_hook(self, fn_name, hook_name, *args, **kwargs)
        if hook_name is not None:   # the last call by name; every call in order under <fn_name>.calls
            hooks[fn_name], hooks[f"{fn_name}.kwargs"] = result, kwargs
            hooks.setdefault(f"{fn_name}.calls", []).append(result)
        return result

    with mock.patch.object(Tensor, "cuda", lambda t, *a, **k: t):   # USB's own choice of arguments (DARP: idx_ulb)
        given = alg.process_batch(**{k: t for k, t in v.usb_args().items() if t is not None})
    torch.manual_seed(seed)
    np.random.seed(seed)     # MixUp's lambda (numpy), like its permutation (torch), drawn the same on both sides
    with mock.patch.object(type(alg), "call_hook", recording), mock.patch.object(Tensor, "cuda", lambda t, *a, **k: t):
        out, log = alg.train_step(**given)
    alg.it += 1
    alg.epoch = alg.it // alg.num_iter_per_epoch    # USB's loop: the epoch of the next step
    return out["loss"], log, hooks


def _our_step(adapter: Any, alg: Algorithm, model: nn.Module, v: Views, step: int, seed: int) -> StepOutput:
    """Ours: the adapter's ``our_step``, else the step the algorithm declares (its StepSpec: views fed from
    :data:`VIEW_SOURCE`, one concatenated forward or its own forwards with BatchNorm control), built by the
    trainer's own :func:`mutexmatch.training.extended_step.step_inputs`."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    if hasattr(adapter, "our_step"):
        return adapter.our_step(alg, model, v, step)
    spec = alg.step
    x = torch.cat([getattr(v, VIEW_SOURCE[n]) for n in spec.made(True)])
    return alg.compute(model, step_inputs(spec, x, num_lb=len(v.y_lb), num_ulb=len(v.idx_ulb),
                                          features=features_forward(model, model), teacher=None,
                                          targets_lb=v.y_lb, ulb_idx=v.idx_ulb, step=step, rot_label=v.rot_v,
                                          lb_pos=v.idx_lb))


def separate_step(alg: Algorithm, model: nn.Module, v: Views, step: int, images: dict[str, Tensor],
                  teacher: nn.Module | None = None) -> StepOutput:
    """Our step for an algorithm with separate forwards (StepSpec forward 'separate'), built as the trainer builds
    it (:func:`mutexmatch.training.extended_step.step_inputs`): ``images`` by our view name, forwards through ``model``
    (BatchNorm statistics kept where the algorithm asks), ``teacher`` the EMA model (Mean Teacher)."""
    x = torch.cat([images[n] for n in alg.step.views])
    inp = step_inputs(alg.step, x, num_lb=len(v.y_lb), num_ulb=len(v.idx_ulb), features=features_forward(model, model),
                      teacher=None if teacher is None else teacher_forward(teacher), targets_lb=v.y_lb,
                      ulb_idx=v.idx_ulb, step=step)
    return alg.compute(model, inp)


def _grads(model: nn.Module, names: dict[str, str] | None = None) -> dict[str, Tensor]:
    """Parameter gradients by name; ``names`` (ours -> USB's) renames USB's to ours."""
    ours_of = {u: o for o, u in (names or {}).items()}
    return {ours_of.get(n, n): p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _sgd(model: nn.Module, lr: float) -> None:
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * p.grad
            p.grad = None


def _check_step(adapter: Any, step: int, ours_alg: Algorithm, usb_alg: Any, rec: Record,
                grads: tuple[dict[str, Tensor], dict[str, Tensor]]) -> None:
    """Loss, every gradient, mask, pseudo-label, the named terms and the algorithm state: ours == USB's."""
    at = f"{adapter.name}, step {step}"
    torch.testing.assert_close(rec.ours.loss, rec.usb_loss, msg=lambda m: f"{at}: loss\n{m}")
    assert grads[0].keys() == grads[1].keys(), f"{at}: parameters with a gradient differ"
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], msg=lambda m: f"{at}: gradient of {n}\n{m}")
    usb_mask = adapter.usb_mask(rec) if hasattr(adapter, "usb_mask") else rec.usb_hooks.get("masking")
    if usb_mask is not None:
        torch.testing.assert_close(rec.ours.mask, usb_mask, msg=lambda m: f"{at}: mask\n{m}")
    else:   # USB has no mask (Pi-Model, Mean Teacher, VAT): nor do we
        assert rec.ours.mask is None, f"{at}: USB masks nothing, ours returned a mask"
    usb_targets = (adapter.usb_targets(rec) if hasattr(adapter, "usb_targets") else
                   rec.usb_hooks.get("gen_ulb_targets"))
    if usb_targets is None:   # USB makes no pseudo-labels (consistency methods); ours are diagnostics only
        pass
    elif usb_targets.dim() == 2:      # USB's soft targets (UDA, Dash) vs our StepOutput.soft_target
        torch.testing.assert_close(rec.ours.soft_target, usb_targets, msg=lambda m: f"{at}: soft targets\n{m}")
        usb_targets = usb_targets.argmax(dim=1)
    if usb_targets is not None:
        assert torch.equal(rec.ours.pseudo_label, usb_targets), f"{at}: pseudo-labels differ"
    for ours_term, usb_key in adapter.terms.items():
        torch.testing.assert_close(rec.ours.terms[ours_term].item(), float(rec.usb_log[usb_key]),
                                   msg=lambda m: f"{at}: term {ours_term} vs USB {usb_key}\n{m}")
    for what, (mine, theirs) in adapter.state(ours_alg, usb_alg).items():
        torch.testing.assert_close(torch.as_tensor(mine).float(), torch.as_tensor(theirs).float(),
                                   msg=lambda m: f"{at}: state {what}\n{m}")


@dataclass
class Lockstep:
    """Defaults of a lockstep run; an adapter's attributes of the same names override them."""

    num_classes: int = 4
    d_in: int = 6
    width: int = 16
    batch: int = 4
    mu: int = 4
    lb_size: int = 16
    ulb_size: int = 64
    steps: int = 6
    first_step: int = 0             # the iteration both sides start at (USB's ``it``; ours' step)
    total_steps: int | None = None  # the run's length (USB's num_train_iter, ours' total_steps); None: ``steps``
    lr: float = 0.05
    seed: int = 0
    min_mixed: int | None = None    # steps whose mask is not constant; None: every step
    batchnorm: bool = False         # TinyNet with a BatchNorm2d (running statistics compared after every step)
    second_strong: bool = False     # a second strong view x_ulb_s_1 (CoMatch, ReMixMatch)
    image_views: bool = False       # views shaped (N, 1, 1, d_in), as images (VAT's per-image norms)
    rotated: bool = False           # a view x_ulb_s_0_rot and its labels rot_v (ReMixMatch)
    labeled_strong: bool = False    # a strong view x_lb_s of the labeled batch (DeFixMatch)
    medium: bool = False            # a medium view x_ulb_m of the unlabeled batch (SequenceMatch)
    lb_counts: tuple[int, ...] | None = None   # labeled images a class (long-tailed); None: lb_size, balanced


def _models(adapter: Any, cfg: Lockstep) -> tuple[nn.Module, nn.Module, dict[str, str]]:
    """(ours, USB's, our state name -> USB's) on the same weights: TinyNet and :class:`UsbNet` over its twin, or
    what the adapter's ``models(ours_tiny, usb_tiny)`` makes of them (extra heads, USB's wrapper around UsbNet)."""
    ours_net = TinyNet(cfg.d_in, cfg.width, cfg.num_classes, adapter.logit_scale, cfg.batchnorm)
    usb_tiny = TinyNet(cfg.d_in, cfg.width, cfg.num_classes, adapter.logit_scale, cfg.batchnorm)
    if hasattr(adapter, "models"):
        ours_net, usb_net, names = adapter.models(ours_net, UsbNet(usb_tiny))
    else:
        usb_net, names = UsbNet(usb_tiny), {n: f"net.{n}" for n in ours_net.state_dict()}
    _sync(ours_net, usb_net, names)
    return ours_net, usb_net, names


def _sync(ours: nn.Module, usb: nn.Module, names: dict[str, str]) -> None:
    """USB's model takes our weights and buffers (every one of its state entries must have a name in ``names``)."""
    usb.load_state_dict({names[n]: t for n, t in ours.state_dict().items()})


def _both_sides(adapter: Any) -> tuple[Lockstep, nn.Module, nn.Module, dict[str, str], Algorithm, Any]:
    """The run's settings, our model and USB's on the same weights (with our state name -> USB's), our algorithm
    and USB's, both prepared."""
    cfg = Lockstep(**{k: getattr(adapter, k) for k in Lockstep.__dataclass_fields__ if hasattr(adapter, k)})
    if cfg.lb_counts is not None:
        cfg.lb_size = sum(cfg.lb_counts)
    torch.manual_seed(cfg.seed)
    ours_net, usb_net, names = _models(adapter, cfg)
    sizes = {"num_classes": cfg.num_classes, "ulb_size": cfg.ulb_size}
    total = cfg.total_steps or cfg.steps
    lb_targets = None if cfg.lb_counts is None else [c for c, n in enumerate(cfg.lb_counts) for _ in range(n)]
    usb = build_usb(adapter.usb_name, usb_net, adapter.usb_args, lb_size=cfg.lb_size,
                    total_steps=total, imb=getattr(adapter, "usb_imb_name", None), lb_targets=lb_targets, **sizes)
    imb = (adapter.imb_name, adapter.imb_params) if hasattr(adapter, "imb_name") else None
    ours = build_ours(adapter.name, adapter.ours_params, total_steps=total, lb_size=cfg.lb_size,
                      steps_per_epoch=-(-cfg.ulb_size // (cfg.batch * cfg.mu)), imb=imb, lb_counts=cfg.lb_counts,
                      **sizes)   # the trainer's rule
    if hasattr(adapter, "wrap"):   # USB's __init__ wrapped its model (ABC's ABCNet): compare that one
        usb_net, names = adapter.wrap(ours_net, usb, names)
        _sync(ours_net, usb_net, names)
    usb.it = cfg.first_step
    usb.epoch = usb.it // usb.num_iter_per_epoch
    if hasattr(adapter, "prepare"):
        adapter.prepare(ours, usb, torch.Generator().manual_seed(cfg.seed + 2))
    return cfg, ours_net, usb_net, names, ours, usb


def run_side_by_side(adapter: Any) -> tuple[nn.Module, list[tuple[Views, Record]]]:
    """Both sides of ``adapter`` on the same fixed weights (no update) and the same views for its ``steps`` steps,
    nothing compared: the net and each step's views and record, for a test that asserts a deliberate deviation."""
    cfg, ours_net, _, _, ours, usb = _both_sides(adapter)
    data, steps = Data(cfg, cfg.seed + 1), []
    for step in range(cfg.steps):
        v = data.next()
        with torch.no_grad():
            usb_loss, usb_log, hooks = _usb_step(usb, v, cfg.seed + 100 + step)
            out = _our_step(adapter, ours, ours_net, v, cfg.first_step + step, cfg.seed + 100 + step)
        steps.append((v, Record(out, usb_loss, usb_log, hooks)))
    return ours_net, steps


def run_lockstep(adapter: Any) -> list[Record]:
    """Build both sides from ``adapter`` and step them together, checking everything every step (see module doc)."""
    cfg, ours_net, usb_net, names, ours, usb = _both_sides(adapter)
    data, records = Data(cfg, cfg.seed + 1), []
    for step in range(cfg.steps):
        v = data.next()
        if hasattr(adapter, "before_usb_step"):   # USB's before_train_step hooks the algorithm's step reads
            adapter.before_usb_step(usb)
        usb_loss, usb_log, hooks = _usb_step(usb, v, cfg.seed + 100 + step)
        usb_loss.backward()
        out = _our_step(adapter, ours, ours_net, v, cfg.first_step + step, cfg.seed + 100 + step)
        out.loss.backward()
        rec = Record(out, usb_loss.detach(), usb_log, hooks)
        _check_step(adapter, step, ours, usb, rec, (_grads(ours_net), _grads(usb_net, names)))
        records.append(rec)
        _sgd(ours_net, cfg.lr)
        _sgd(usb_net, cfg.lr)
        if hasattr(adapter, "after_sgd"):   # e.g. both EMA teachers' updates (the trainer's after the optimiser)
            adapter.after_sgd(ours, usb)
        usb_state = usb_net.state_dict()
        for name, p in ours_net.state_dict().items():   # weights and BatchNorm running statistics
            torch.testing.assert_close(p, usb_state[names[name]], msg=lambda m: f"{name} after SGD\n{m}")
        _sync(ours_net, usb_net, names)   # lockstep: both start the next step on the same weights
    mixed = sum(r.ours.mask is not None and bool(r.ours.mask.min() < r.ours.mask.max()) for r in records)
    needed = cfg.steps if cfg.min_mixed is None else cfg.min_mixed
    assert mixed >= needed, (f"{adapter.name}: masks mixed (neither all 0 nor all 1) in {mixed} of {cfg.steps} "
                             f"steps, wanted {needed}: change logit_scale")
    return records


def _require_semilearn() -> None:
    if importlib.util.find_spec("semilearn") is None:
        pytest.skip("USB reference not installed: `make usb-reference` (pip install --no-deps semilearn=="
                    f"{pinned_version()}) enables the lockstep tests")
    installed, pinned = importlib.metadata.version("semilearn"), pinned_version()
    assert installed == pinned, (f"semilearn {installed} is installed, the lockstep reference is {pinned}: "
                                 "`make usb-reference`")
    import_semilearn()


@pytest.fixture(scope="session")
def usb_lockstep():
    """``run_lockstep`` when semilearn (the pinned version) is installed; skipped with the command otherwise."""
    _require_semilearn()
    return run_lockstep


@pytest.fixture(scope="session")
def usb_side_by_side():
    """``run_side_by_side`` when semilearn (the pinned version) is installed; skipped with the command otherwise."""
    _require_semilearn()
    return run_side_by_side


@pytest.fixture(scope="session")
def usb_harness():
    """This module (``TinyNet``, ``build_ours``, ...) for the golden-record tests of USB code after the pinned
    version (tests/mutexmatch/algorithms/golden/make_usb_after_032.py): they replay USB's recorded steps and need no
    semilearn."""
    return sys.modules[__name__]
