"""CoSSL (Fan et al., CVPR 2022, "CoSSL: Co-Learning of Representation and Classifier for Imbalanced Semi-Supervised
Learning"), as USB 0.3.2 runs it (``semilearn/imb_algorithms/cossl``; the lockstep test is its reference).

A teacher head ``model.heads["teacher"]`` (USB's ``CoSSL_Net.teacher_classifier``, Linear with bias) beside the TPC.

- **Warm-up** (USB's ``before_train_epoch`` at epoch ``warm_epoch``; :func:`classifier_warmup`): on the EMA model's
  features (eval mode), a bias-free classifier of the class means, normalised (weight imprinting), scores the
  images; TFE (tail-class feature enhancement) synthesises, for every class c with fewer labeled images than the
  largest, max_k N_k - N_c features lam a + (1 - lam) b, a drawn with replacement from c's labeled features
  (``np.random.choice``), lam ~ Beta(0.75, 0.75) (``np.random.beta``), b the other classes' labeled and the unlabeled
  (strong view) features ranked by the imprinted classifier's probability of c (weak view), the first ones first. A
  re-initialised Linear is trained on the labeled + synthetic features with Adam (lr 1e-3, weight decay
  ``tfe_warm_wd`` on the weight only) for ``tfe_warm_epoch`` x ``epoch_steps`` steps of ``tfe_warm_bs`` (USB:
  x num_eval_iter, 1,024 = its epoch in every classic-CV-imb config), its EMA (``tfe_warm_ema_decay``) beside; the
  head initialises the model's teacher head, its EMA the EMA model's. ``mixup_prob`` = (max_k N_k - N_c) / max_k N_k.
- **Each step after it**: the base's step plus L_tea = CE(h(f~), y) (``train/tea``, weight 1) on a class-balanced
  labeled batch (USB's ``WeightedRandomSampler``; strong view where ``tfe_augment`` is strong) and an unlabeled
  batch (strong view, ``tfe_u_ratio`` x B): f the EMA model's features (train mode, no gradient, as USB's
  ``ema_model``), per sample i with probability ``mixup_prob[.]`` f~_i = lam f(x_i) + (1 - lam) f(u_i),
  lam ~ U(max_lam, 1), else f(x_i). The draws are USB's: ``random.random()`` per sample, ``np.random.uniform`` per
  mixed sample, on the host (the batch's labels come from the host sampler: no device read).
- **Evaluation** uses the teacher head from the warm-up on (USB's ``evaluate`` switches ``out_key`` to
  ``logits_tfe``), the TPC before.

USB's defect, kept as ``form: usb``: it reads ``mixup_prob[label_x.argmax()]`` of a 0-d class index, always entry 0,
the first class's probability for every sample (0 under a consistent long tail: USB never mixes; under a reversed
one it mixes every class at the tail's rate). ``form: fixed`` reads the sample's own class, the paper's rule.

USB's optimiser also holds the teacher head (``set_optimizer`` runs after ``CoSSL_Net`` wraps the model): after the
warm-up the head's gradient is applied twice a step, by the main optimiser and then by ``tfe_optimizer`` (SGD,
``tfe_warm_lr``, ``tfe_warm_wd``, USB's ``get_optimizer``), before ``zero_grad``:
:func:`mutexmatch.training.teacher_streams.teacher_optimizer`.
"""
from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn
from torch.utils.data import DataLoader

from mutexmatch.algorithms.base import StepInputs, StepOutput
from mutexmatch.data.prefetch import to_device
from mutexmatch.imb_algorithms.base import (EPOCH_STEPS_DOC, ImbAlgorithm, ImbParams, register_imb_algorithm,
                                            usb_epoch)
from mutexmatch.params import USB_EPOCH_STEPS, Fraction, Positive, PositiveSteps, Probability, Steps, Weight

HEAD = "teacher"


class CoSSLParams(ImbParams):
    """CoSSL: USB's config/classic_cv_imb/*_cossl values (the same in every CIFAR and STL-10 setting; ImageNet-127
    warms up at epoch 150)."""

    max_lam: Fraction = Field(0.6, description="[λ_max] CoSSL: a mixed feature keeps lam ~ U(max_lam, 1) of the "
                              "labeled one (USB's cossl_max_lam).")
    tfe_augment: Literal["weak", "strong"] = Field("strong", description="CoSSL: the view of the class-balanced "
                                                   "labeled batch (USB's cossl_tfe_augment).")
    tfe_u_ratio: PositiveSteps = Field(1, description="CoSSL: unlabeled images per labeled one in the teacher's "
                                       "batch (USB's cossl_tfe_u_ratio).")
    warm_epoch: Steps = Field(200, description="CoSSL: USB epoch at whose start the teacher head is warmed up; "
                              "from then on it trains and is evaluated (USB's cossl_warm_epoch).")
    tfe_warm_epoch: PositiveSteps = Field(10, description="CoSSL: warm-up length in epochs of `epoch_steps` Adam "
                                          "steps (USB's cossl_tfe_warm_epoch x num_eval_iter).")
    tfe_warm_lr: Positive = Field(0.02, description="CoSSL: learning rate of the teacher head's own SGD after the "
                                  "warm-up (USB's cossl_tfe_warm_lr; the warm-up's Adam uses 1e-3, as USB's).")
    tfe_warm_ema_decay: Probability = Field(0.999, description="CoSSL: EMA decay of the head during the warm-up "
                                            "(USB's cossl_tfe_warm_ema_decay).")
    tfe_warm_wd: Weight = Field(5e-4, description="CoSSL: weight decay of the head's weight in the warm-up and its "
                                "own SGD (USB's cossl_tfe_warm_wd).")
    tfe_warm_bs: PositiveSteps = Field(64, description="CoSSL: warm-up batch size (USB's cossl_tfe_warm_bs).")
    form: Literal["usb", "fixed"] = Field("usb", description="CoSSL: `usb` = semilearn 0.3.2 (every sample mixes "
                                          "with the first class's probability), `fixed` = its own class's "
                                          "(docs/longtail.md).")
    epoch_steps: Steps = Field(USB_EPOCH_STEPS, description=f"CoSSL: {EPOCH_STEPS_DOC}")


# ----------------------------------------------------------------------------------------------------------------------
# The warm-up (USB's classifier_warmup, weight_imprint, TFE, classifier_train), on features computed by the caller.
# ----------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WarmupFeatures:
    """The EMA model's features (eval mode) USB's warm-up reads: the labeled set twice (weight imprinting's pass and
    TFE's, each its own augmentation in USB), its classes, and the unlabeled pool's weak and strong views."""

    imprint: Tensor        # (N_l, D)
    labeled: Tensor        # (N_l, D)
    targets: Tensor        # (N_l,) int64
    weak: Tensor           # (N_u, D)
    strong: Tensor         # (N_u, D)


def _loader_seed() -> None:
    """The base seed a DataLoader iterator draws from torch's generator (USB's feature loaders each draw one): drawn
    where USB's are, so the head's re-initialisation and the shuffles draw what USB's do."""
    torch.empty((), dtype=torch.int64).random_()


def imprinted_weight(feats: Tensor, targets: Tensor, num_classes: int) -> Tensor:
    """USB's ``weight_imprint``: row c = the mean feature of class c, L2-normalised (a bias-free classifier)."""
    weight = torch.zeros(num_classes, feats.shape[1], device=feats.device)
    for c in range(num_classes):
        mean = feats[targets == c].mean(0)
        weight[c] = mean / mean.norm(p=2)
    return weight


def tfe_features(feats: WarmupFeatures, weight: Tensor, counts: Sequence[int]) -> tuple[Tensor, Tensor]:
    """USB's ``TFE``: the labeled features and the synthetic ones (module doc), with one-hot targets, labeled first.
    numpy's global generator draws the picks and the lambdas class by class, as USB's."""
    num_classes, most = len(counts), max(counts)
    lb_probs = torch.softmax(feats.labeled @ weight.T, dim=1)
    ulb_probs = torch.softmax(feats.weak @ weight.T, dim=1)
    positions = torch.arange(len(feats.labeled))
    per_class = [positions[(feats.targets == c).cpu()] for c in range(num_classes)]
    new_feats, new_targets = [feats.labeled], [F.one_hot(feats.targets, num_classes).float()]
    for c in range(num_classes):
        size = most - counts[c]
        if size <= 0:
            continue
        own = feats.labeled[feats.targets == c]
        others = torch.cat(per_class[:c] + per_class[c + 1:]).to(feats.labeled.device)
        other_feats = torch.cat([feats.labeled[others], feats.strong])
        other_probs = torch.cat([lb_probs[others], ulb_probs])
        _, order = other_probs[:, c].sort(descending=True)
        picks = np.random.choice(list(range(len(own))), size, replace=True)
        lam = np.random.beta(0.75, 0.75, size=size)
        a = own[torch.as_tensor(picks, device=own.device)]
        b = other_feats[order][:size]
        # USB: l * a + (1 - l) * b, l a float64 scalar: each factor rounded to float32 first, as here
        lam32 = torch.as_tensor(lam, dtype=torch.float32, device=a.device)[:, None]
        rest32 = torch.as_tensor(1 - lam, dtype=torch.float32, device=a.device)[:, None]
        new_feats.append(lam32 * a + rest32 * b)
        new_targets.append(F.one_hot(torch.full((size,), c, device=a.device), num_classes).float())
    return torch.cat(new_feats), torch.cat(new_targets)


def train_teacher(head: nn.Linear, feats: Tensor, targets: Tensor, params: CoSSLParams, epoch_steps: int
                  ) -> nn.Linear:
    """USB's ``classifier_train`` loop: ``head`` (re-initialised) trained in place with Adam(lr 1e-3, weight decay on
    the weight only) on soft-target cross-entropy, batches of ``tfe_warm_bs`` shuffled by a DataLoader as USB's (a
    fresh iterator each epoch and where one runs out); returns its EMA (USB's ``WeightEMA``, no decay of its own),
    updated twice a step as USB's is (its effective decay is ``tfe_warm_ema_decay`` squared)."""
    ema = copy.deepcopy(head).requires_grad_(False)
    decay = [p for n, p in head.named_parameters() if "bias" not in n]
    rest = [p for n, p in head.named_parameters() if "bias" in n]
    optimizer = torch.optim.Adam([{"params": decay, "weight_decay": params.tfe_warm_wd},
                                  {"params": rest, "weight_decay": 0}], lr=1e-3)
    loader = DataLoader(range(len(feats)), batch_size=params.tfe_warm_bs, shuffle=True, drop_last=True)
    if len(loader) == 0:
        raise ValueError(f"imb_algorithm.tfe_warm_bs={params.tfe_warm_bs}: larger than the warm-up's "
                         f"{len(feats)} features (drop_last leaves no batch); lower it")
    pairs = list(zip(head.state_dict().values(), ema.state_dict().values()))
    for _ in range(params.tfe_warm_epoch):
        batches = iter(loader)
        for _ in range(epoch_steps):
            idx = next(batches, None)
            if idx is None:
                batches = iter(loader)
                idx = next(batches)
            idx = idx.to(feats.device)
            loss = (-F.log_softmax(head(feats[idx]), dim=1) * targets[idx]).sum(dim=1).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():     # twice: USB's WeightEMA walks the state dict, which lists the TPC twice
                for param, avg in pairs * 2:    # (CoSSL_Net.classifier is the backbone's classifier too)
                    avg.mul_(params.tfe_warm_ema_decay).add_(param * (1.0 - params.tfe_warm_ema_decay))
    return ema


def classifier_warmup(feats: WarmupFeatures, counts: Sequence[int], params: CoSSLParams, epoch_steps: int,
                      template: nn.Linear) -> tuple[nn.Linear, nn.Linear]:
    """USB's ``classifier_warmup``: (teacher head, its EMA) from the features; ``template`` (the TPC) gives the
    head's shape, re-initialised by ``reset_parameters`` from torch's generator where USB resets its copy's."""
    _loader_seed()                                  # weight_imprint's loader
    weight = imprinted_weight(feats.imprint, feats.targets, len(counts))
    nn.Linear(weight.shape[1], len(counts), bias=False)     # USB builds its imprinted classifier so: its init draws
    head = copy.deepcopy(template).requires_grad_(True)
    head.reset_parameters()
    _loader_seed()                                  # TFE's labeled loader
    _loader_seed()                                  # TFE's unlabeled loader
    with torch.no_grad():
        x, y = tfe_features(feats, weight, counts)
    ema = train_teacher(head, x, y, params, epoch_steps)
    return head, ema


def mixup_probabilities(counts: Sequence[int]) -> list[float]:
    """USB's ``mixup_prob``: (max_k N_k - N_c) / max_k N_k per class."""
    most = max(counts)
    return [(most - n) / most for n in counts]


# ----------------------------------------------------------------------------------------------------------------------
# The algorithm.
# ----------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TeacherBatch:
    """One step's teacher batch: the class-balanced labeled images and their classes (on the device, and as host
    ints from the sampler), and the unlabeled images (strong view, ``tfe_u_ratio`` x B)."""

    x: Tensor
    y: Tensor
    labels: Sequence[int]
    u: Tensor


@register_imb_algorithm("cossl")
class CoSSL(ImbAlgorithm):
    """CoSSL (Fan et al., 2022): a teacher head warmed up on class-balanced features (tail-class feature
    enhancement), then trained on feature mixups of class-balanced labeled and unlabeled images; it is the head
    evaluated from the warm-up on."""

    imb_params_model = CoSSLParams
    imb: CoSSLParams
    imb_terms = ("tea",)
    bases = ("fixmatch", "remixmatch")

    @classmethod
    def imb_heads(cls, params: ImbParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        return {HEAD: nn.Linear(feat_dim, num_classes)}

    def imb_init(self) -> None:
        self.counts = [int(n) for n in self.ctx.labeled_counts.tolist()]
        self.mixup_prob: list[float] | None = None       # USB sets it at the warm-up
        # Set by the trainer (mutexmatch.training.teacher_streams) or a test: step -> TeacherBatch (the class-balanced
        # and the strong unlabeled stream), the EMA model -> the warm-up's features, the teacher head's own optimiser
        # (stepped by teacher_step, which the trainer calls right after its optimiser's step) and the models whose
        # evaluated head switches.
        self.teacher_batches: Callable[[int], TeacherBatch] | None = None
        self.warmup_source: Callable[[nn.Module], WarmupFeatures] | None = None
        self.tfe_optimizer: torch.optim.Optimizer | None = None
        self.evaluated_models: tuple[nn.Module, ...] = ()
        self.last_step: int | None = None

    def imb_term_weights(self) -> dict[str, float]:
        return {"tea": 1.0}

    def _epoch_steps(self) -> int:
        return self.imb.epoch_steps or self.ctx.steps_per_epoch

    def teaching(self, step: int) -> bool:
        """Whether ``step`` is in or after the warm-up epoch (USB: ``self.epoch >= self.warm_epoch``)."""
        return usb_epoch(step, self._epoch_steps(), self.ctx.total_steps)[0] >= self.imb.warm_epoch

    def warm_up(self, model: nn.Module, ema_model: nn.Module, feats: WarmupFeatures,
                template: nn.Linear | None = None) -> None:
        """USB's ``before_train_epoch`` at ``warm_epoch``: the warmed-up head into the model, its EMA into the EMA
        model, ``mixup_prob`` set, the teacher head evaluated from now on; ``template``: the TPC (default
        ``model.backbone.classifier``), whose shape the head's re-initialisation draws."""
        template = model.backbone.classifier if template is None else template
        head, ema = classifier_warmup(feats, self.counts, self.imb, self._epoch_steps(), template)
        with torch.no_grad():
            for target, source in ((model, head), (ema_model, ema)):
                target.heads[HEAD].weight.copy_(source.weight)
                target.heads[HEAD].bias.copy_(source.bias)
                target.evaluated_head = HEAD
        for m in self.evaluated_models:
            m.evaluated_head = HEAD
        self.mixup_prob = mixup_probabilities(self.counts)

    def mix_draws(self, labels: Sequence[int]) -> tuple[list[bool], list[float]]:
        """Per sample USB's ``random.random() < mixup_prob[.]`` and, where it mixes, ``np.random.uniform(max_lam,
        1)`` (else lam 1); ``form`` usb reads entry 0 for every sample (USB's ``label_x.argmax()`` of a 0-d label)."""
        if self.mixup_prob is None:
            raise ValueError("imb_algorithm.name='cossl': a teacher step before the warm-up (mixup_prob unset); "
                             "warm_up() runs at the start of epoch warm_epoch")
        mixed, lams = [], []
        for label in labels:
            prob = self.mixup_prob[0 if self.imb.form == "usb" else int(label)]
            mix = random.random() < prob
            mixed.append(mix)
            lams.append(float(np.random.uniform(self.imb.max_lam, 1.0, size=1)[0]) if mix else 1.0)
        return mixed, lams

    def teacher_features(self, batch: TeacherBatch) -> tuple[Tensor, Tensor]:
        """The mixed features f~ (module doc) and which samples mixed: the EMA model's features of both batches
        (train mode, as USB's ``ema_model``, no gradient), lam f(x) + (1 - lam) f(u) where a sample mixes."""
        ema = self.ctx.ema_model
        if ema is None:
            raise ValueError("imb_algorithm.name='cossl': its teacher step needs the EMA model "
                             "(TrainContext.ema_model)")
        mixed, lams = self.mix_draws(batch.labels)
        was_training = ema.training
        ema.train()     # USB's ema_model is never put in eval mode: BatchNorm by batch (the buffers are the model's)
        with torch.no_grad():
            fx, fu = ema(batch.x).float(), ema(batch.u)[:len(batch.x)].float()
        ema.train(was_training)
        with torch.no_grad():     # the draws were made on the host: copied without making it wait
            lam = to_device(torch.tensor(lams, dtype=fx.dtype), fx.device)[:, None]
            mask = to_device(torch.tensor(mixed), fx.device)
            return torch.where(mask[:, None], lam * fx + (1 - lam) * fu, fx), mask

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        out = super().compute(model, inp)                                   # type: ignore[misc]
        self.last_step = inp.step
        if not self.teaching(inp.step):    # USB logs no tea_loss before; ours 0
            return self.add_terms(out, {"tea": torch.zeros((), device=out.loss.device)}, {})
        if self.mixup_prob is None and self.warmup_source is not None:   # the warm-up epoch's first step
            self.warm_up(model, self.ctx.ema_model, self.warmup_source(self.ctx.ema_model))
        if self.teacher_batches is None:
            raise ValueError("imb_algorithm.name='cossl': no teacher batches (CoSSL.teacher_batches unset)")
        batch = self.teacher_batches(inp.step)
        feats, mixed = self.teacher_features(batch)
        logits = model.heads[HEAD](feats)
        return self.add_terms(out, {"tea": F.cross_entropy(logits, batch.y)}, {"tea_feats": feats,
                                                                             "tea_mixed": mixed})

    def teacher_step(self) -> None:
        """USB's ``tfe_optimizer.step()`` after the main optimiser's, from the warm-up epoch on (the gradient the
        main optimiser applied to the teacher head is applied again)."""
        if self.tfe_optimizer is not None and self.last_step is not None and self.teaching(self.last_step):
            self.tfe_optimizer.step()

    def imb_state_dict(self) -> dict[str, Any]:
        return {"mixup_prob": self.mixup_prob,
                "tfe_optimizer": None if self.tfe_optimizer is None else self.tfe_optimizer.state_dict()}

    def imb_load_state_dict(self, state: Any) -> None:
        super().imb_load_state_dict(state)
        self.mixup_prob = None if state["mixup_prob"] is None else [float(p) for p in state["mixup_prob"]]
        if self.tfe_optimizer is not None and state["tfe_optimizer"] is not None:
            self.tfe_optimizer.load_state_dict(state["tfe_optimizer"])
        if self.mixup_prob is not None:     # warmed up: the teacher head is evaluated (an attribute, not a weight)
            for m in self.evaluated_models:
                m.evaluated_head = HEAD
