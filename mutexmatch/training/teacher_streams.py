"""CoSSL's trainer side (issue 41 item 3; the algorithm is :mod:`mutexmatch.imb_algorithms.cossl`): the two extra
batch streams its teacher head trains on, the warm-up's features, and its own optimiser.

- **Class-balanced labeled stream** (USB's ``tfe_train_lb``): B labeled images a step, drawn with replacement with
  weight 1 / N_y (USB's ``WeightedRandomSampler`` with class rates make_imb_data(30000, C, 1) / N_c: every class
  equally likely), strong view (weak with ``tfe_augment: weak``); their labels on the device and, from the host
  sampler, on the host (the mixup draws read them there: no device read in the step).
- **Unlabeled stream** (USB's ``tfe_train_ulb``): ``tfe_u_ratio`` x B pool images a step, each pass over the pool
  a fresh permutation without replacement and the last partial batch dropped (USB's shuffle, drop_last), strong
  view (USB reads ``x_ulb_s`` / ``x_ulb_s_0`` whatever ``tfe_augment`` is).
- Both are drawn from generators seeded by (``train.seed``, step): a resumed run draws the same batches and the
  checkpoint needs nothing more; the augmentations are the trainer's (:mod:`mutexmatch.data.augment`).
- **Warm-up features**: the EMA model in eval mode on the labeled set's weak view twice (USB's weight imprinting
  and its TFE each iterate the augmented labeled set) and the pool's weak and strong views.
- **The teacher's optimiser**: a step post-hook on the trainer's optimiser calls ``CoSSL.teacher_step`` (USB's
  ``CoSSLParamUpdateHook``: ``optimizer.step()`` then ``tfe_optimizer.step()``, before the EMA update); its state is
  in the algorithm's checkpoint state.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from mutexmatch.data.augment import normalize, strong_augment, weak_augment, weak_crop
from mutexmatch.data.prefetch import to_device
from mutexmatch.imb_algorithms.cossl import HEAD, CoSSL, CoSSLParams, TeacherBatch, WarmupFeatures
from mutexmatch.training.layer_decay import usb_param_groups

# Seeds of the streams' generators: train.seed * SEED_STRIDE + key (step keys, then the warm-up's and the passes').
SEED_STRIDE = 1_000_003
WARMUP_KEY, PASS_KEY = 1 << 30, 1 << 31
CHUNK = 256     # images a forward of the warm-up's feature passes


class TeacherStreams:
    """The streams and the warm-up's features of one run (module doc), from the trainer's batch source."""

    def __init__(self, trainer: Any, params: CoSSLParams) -> None:
        src, split = trainer.batches, trainer.split
        self.cfg, self.info, self.device = trainer.cfg, src.info, trainer.device
        labeled = torch.from_numpy(split.labeled)
        self.lb_x = src.train_x[labeled.to(self.device)]
        self.lb_labels = trainer.bundle.train.y[labeled]                     # on the host
        self.lb_y = self.lb_labels.to(self.device)
        counts = torch.bincount(self.lb_labels, minlength=trainer.num_classes)
        _require_every_class(counts.tolist(), trainer.cfg.data.imbalance)
        self.weights = 1.0 / counts.double()[self.lb_labels]
        self.pool, self.ulb_x = torch.from_numpy(split.unlabeled), src.ulb_x
        self.batch = self.cfg.train.batch_size
        self.u_batch = params.tfe_u_ratio * self.batch
        if len(self.pool) < self.u_batch:
            raise ValueError(f"imb_algorithm.tfe_u_ratio={params.tfe_u_ratio}: its unlabeled batch of {self.u_batch} "
                             f"is larger than the pool ({len(self.pool)} images); lower it or train.batch_size")
        pad, pad_mode = weak_crop(self.info, self.cfg.data.crop_ratio)
        self.aug = {"flip": self.info.flip, "pad": pad, "pad_mode": pad_mode}
        self.strong_labeled = params.tfe_augment == "strong"
        self._order: tuple[int, Tensor] = (-1, torch.empty(0, dtype=torch.long))   # (pass, its permutation)

    def _seed(self, key: int) -> int:
        return self.cfg.train.seed * SEED_STRIDE + key

    def _generators(self, key: int) -> tuple[torch.Generator, torch.Generator | None]:
        """The augmentations' generator on the device and RandAugment's op generator (None on the CPU: the one)."""
        seed = self._seed(key)
        aug = torch.Generator(device=self.device).manual_seed(seed)
        return aug, None if self.device.type == "cpu" else torch.Generator().manual_seed(seed + 1)

    def _view(self, x: Tensor, strong: bool, gen: tuple[torch.Generator, torch.Generator | None]) -> Tensor:
        out = (strong_augment(x, **self.aug, generator=gen[0], op_generator=gen[1]) if strong else
               weak_augment(x, **self.aug, generator=gen[0]))
        return normalize(out, self.info.mean, self.info.std, channels_last=self.cfg.model.channels_last)

    def pool_positions(self, step: int) -> Tensor:
        """Pool positions of step ``step``'s unlabeled images: the (step % P)-th batch of pass step // P's
        permutation, P = N_u // (tfe_u_ratio B) batches a pass (the last partial one dropped)."""
        per_pass = len(self.pool) // self.u_batch
        if self._order[0] != step // per_pass:      # drawn once a pass, not once a step
            self._order = (step // per_pass, torch.randperm(len(self.pool), generator=torch.Generator().manual_seed(
                self._seed(PASS_KEY + step // per_pass))))
        start = (step % per_pass) * self.u_batch
        return self._order[1][start:start + self.u_batch]

    def __call__(self, step: int) -> TeacherBatch:
        """Step ``step``'s teacher batch, drawn on the host and copied without making the host wait
        (:func:`~mutexmatch.data.prefetch.to_device`)."""
        host = torch.Generator().manual_seed(self._seed(step))
        pick = torch.multinomial(self.weights, self.batch, replacement=True, generator=host)
        ulb = self.pool[self.pool_positions(step)]
        gen = self._generators(step)
        x = self._view(self.lb_x[to_device(pick, self.device)], self.strong_labeled, gen)
        u = self._view(self.ulb_x[to_device(ulb, self.device)], True, gen)
        labels = self.lb_labels[pick]
        return TeacherBatch(x, to_device(labels, self.device), labels.tolist(), u)

    def _features(self, ema: nn.Module, images: Tensor, strong: bool,
                  gen: tuple[torch.Generator, torch.Generator | None]) -> Tensor:
        return torch.cat([ema(self._view(images[i:i + CHUNK], strong, gen)).float()
                          for i in range(0, len(images), CHUNK)])

    def warmup_features(self, ema: nn.Module) -> WarmupFeatures:
        """The EMA model's features the warm-up reads (module doc), eval mode, no gradient."""
        gen = self._generators(WARMUP_KEY)
        was_training = ema.training
        ema.eval()
        with torch.no_grad():
            imprint = self._features(ema, self.lb_x, False, gen)
            labeled = self._features(ema, self.lb_x, False, gen)
            weak, strong = [], []
            for i in range(0, len(self.pool), CHUNK):
                images = self.ulb_x[self.pool[i:i + CHUNK].to(self.device)]
                weak.append(self._features(ema, images, False, gen))
                strong.append(self._features(ema, images, True, gen))
        ema.train(was_training)
        return WarmupFeatures(imprint, labeled, self.lb_y, torch.cat(weak), torch.cat(strong))


def _require_every_class(counts: list[int], imbalance: Any) -> None:
    """Refused before the first step: CoSSL's warm-up imprints the mean feature of every class and mixes each tail
    class's own features (USB's weight_imprint and TFE), which a class with no labeled image does not have: USB
    would reach the warm-up, hours in, and fail there (numpy's choice from an empty list) or imprint NaN."""
    empty = [c for c, n in enumerate(counts) if n == 0]
    if not empty:
        return
    split = ("" if imbalance is None else f" (data.imbalance: labeled_head={imbalance.labeled_head}, "
             f"labeled_ratio={imbalance.labeled_ratio}, rule={imbalance.rule!r})")
    raise ValueError(f"imb_algorithm.name='cossl': class{'es' if len(empty) > 1 else ''} "
                     f"{', '.join(map(str, empty))} ha{'ve' if len(empty) > 1 else 's'} no labeled image in this "
                     f"split{split}, labeled per class {counts}; CoSSL's warm-up needs at least one of every class: "
                     "raise labeled_head, lower |labeled_ratio| or use rule 'ceil'")


def teacher_optimizer(head: nn.Module, params: CoSSLParams, optim_name: str, momentum: float, nesterov: bool
                      ) -> torch.optim.Optimizer:
    """USB's ``tfe_optimizer`` (``get_optimizer(teacher_classifier, args.optim, tfe_warm_lr, momentum,
    tfe_warm_wd)``): SGD (``optim.name`` sgd) or AdamW (adamw) over USB's parameter groups (weight decay on the
    weight, none on the bias), as the trainer's own optimiser builds them."""
    groups = usb_param_groups(head, params.tfe_warm_lr, params.tfe_warm_wd, 1.0)
    if optim_name == "adamw":
        return torch.optim.AdamW(groups, lr=params.tfe_warm_lr, weight_decay=params.tfe_warm_wd)
    return torch.optim.SGD(groups, lr=params.tfe_warm_lr, momentum=momentum, weight_decay=params.tfe_warm_wd,
                           nesterov=nesterov)


def attach_teacher_streams(trainer: Any) -> None:
    """Where the trainer's algorithm is CoSSL: its streams, warm-up features, teacher optimiser (stepped after the
    trainer's optimiser) and the models whose evaluated head switches at the warm-up."""
    alg = trainer.algorithm
    if not isinstance(alg, CoSSL):
        return
    streams = TeacherStreams(trainer, alg.imb)
    alg.teacher_batches, alg.warmup_source = streams, streams.warmup_features
    alg.evaluated_models = (trainer.model, trainer.ema.module)
    o = trainer.cfg.optim
    alg.tfe_optimizer = teacher_optimizer(trainer.model.heads[HEAD], alg.imb, o.name, o.momentum, o.nesterov)
    trainer.optimizer.register_step_post_hook(lambda *_: alg.teacher_step())
