"""Makes ``rda.pt``, the golden record of RDA's official code (NJUyued/RDA4RobustSSL) that
tests/mutexmatch/algorithms/test_rda.py compares ours with. Run once, by hand, against a checkout of the official
repository (never copied here: its modules are imported from that checkout):

    python tests/mutexmatch/algorithms/golden/make_rda.py /path/to/RDA4RobustSSL [--commit SHA]

Training: it drives the official ``RDA.train`` (models/rda/rda.py, with ``consistency_loss_rda`` of rda_utils.py and
the official ``ReverseCLS``) on a tiny feature extractor (Linear, BatchNorm1d, tanh, then its linear classifier)
with fixed weights and fixed views: 132 steps (its distribution queues of 128 batches wrap at step 128), plain SGD
(lr 0.05), 6 classes, numpy seeded 0 for its complementary labels. ``Tensor.cuda``/``Module.cuda`` are the
identity, the CUDA events and ``evaluate``/``save_model`` stubs (it runs on the CPU). Recorded per step: the four
losses and the total its tensorboard dict logs, the complementary labels it drew, the hard pseudo-labels of L_cd
and the soft targets of L_ca, every gradient and the BatchNorm statistics after the step's forward; once: the
views, the initial and final weights.

Splits: ``split_ssl_data`` (datasets/data_utils.py) on CIFAR-10's and CIFAR-100's label vectors (5,000 / 500 images
a class, class order) for DARP's protocol (``--mismatch darp`` / ``darp_reversed``) over a grid of n0 (gamma_l) and
gamma (gamma_u), and RDA's own protocol (``--mismatch rda``) for its README's settings: the labeled and the unlabeled
images per class it draws (without the labeled images added to the unlabeled set, ``include_lb_to_ulb=False``).
"""
from __future__ import annotations

import copy
import sys
import tempfile
import types
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from torch import nn
from reference import reference_checkout, stacked_parts  # this folder's (the script's own)

STEPS, LR = 132, 0.05
B, MU, D_IN, WIDTH, C = 4, 2, 6, 8, 6
OUT = Path(__file__).with_name("rda.pt")
DARP_GRID = {"cifar10": ([1, 10, 50, 100, 150, 200], [1, 2, 10, 50, 100, 150, 200]),
             "cifar100": ([1, 10, 20, 50, 100], [1, 10, 20, 50, 100])}
RDA_SETTINGS = [("cifar10", 40, 10, 0), ("cifar10", 40, 10, 2), ("cifar10", 40, 10, 5), ("cifar10", 40, 0, 200),
                ("cifar100", 400, 40, 0), ("cifar100", 400, 40, 10)]   # (dataset, num_labels, n0, gamma)


class Extractor(nn.Module):
    """The tiny feature extractor with its own classifier, the interface of the official nets (``ood_test``)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(D_IN, WIDTH), nn.BatchNorm1d(WIDTH), nn.Tanh())
        self.fc = nn.Linear(WIDTH, num_classes)

    def output_num(self) -> int:
        return WIDTH

    def forward(self, x: torch.Tensor, ood_test: bool = False):
        feat = self.body(x)
        return (self.fc(feat), feat) if ood_test else self.fc(feat)


def views(g: torch.Generator) -> dict[str, torch.Tensor]:
    means = 2.0 * torch.randn(C, D_IN, generator=g)
    y = torch.randint(C, (STEPS, B), generator=g)
    yu = torch.randint(C, (STEPS, B * MU), generator=g)
    xu = means[yu] + torch.randn(STEPS, B * MU, D_IN, generator=g)
    return {"x_lb": means[y] + 0.1 * torch.randn(STEPS, B, D_IN, generator=g), "y_lb": y,
            "x_w": xu + 0.1 * torch.randn(xu.shape, generator=g), "x_s": xu + 0.8 * torch.randn(xu.shape, generator=g)}


class Event:
    def __init__(self, *a, **k) -> None:
        pass

    def record(self) -> None:
        pass

    def elapsed_time(self, other) -> float:
        return 0.0


def train(rda_module, utils_module) -> dict:
    torch.manual_seed(0)
    np.random.seed(0)
    model = rda_module.RDA(lambda num_classes: Extractor(num_classes), C, ema_m=0.999, T=0.5, lambda_u=1.0)
    data = views(torch.Generator().manual_seed(1))
    steps: list[dict] = []
    net = model.train_model

    class Optimizer(torch.optim.SGD):
        def step(self, closure=None):
            steps[-1]["grads"] = {n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None}
            steps[-1]["buffers"] = {n: b.clone() for n, b in net.named_buffers()}   # after the forward
            return super().step(closure)

    ce, consistency = rda_module.ce_loss, utils_module.ce_loss

    def recording_ce(logits, targets, use_hard_labels=True, reduction="none"):   # rda.py's: L_sup, then L_rev
        steps[-1]["ce_calls"] = steps[-1].get("ce_calls", 0) + 1
        if steps[-1]["ce_calls"] == 2:
            steps[-1]["comp_label"] = targets.clone()
        return ce(logits, targets, use_hard_labels, reduction)

    def recording_consistency(logits, targets, use_hard_labels=True, reduction="none"):   # L_cd, then L_ca
        steps[-1]["pseudo_label" if use_hard_labels else "ca_target"] = targets.clone()
        return consistency(logits, targets, use_hard_labels, reduction)

    class Log:
        def update(self, tb_dict, it):
            steps[it].update({k: float(v) for k, v in tb_dict.items() if k.startswith("train/")})

    def batches_lb():
        for t in range(STEPS):
            steps.append({})
            yield data["x_lb"][t], data["y_lb"][t]

    model.tb_log = Log()
    model.set_optimizer(Optimizer(net.parameters(), lr=LR), mock.Mock())
    model.loader_dict = {"train_lb": batches_lb(), "train_ulb": [(data["x_w"][t], data["x_s"][t])
                                                               for t in range(STEPS)], "eval_ulb": None}
    initial = copy.deepcopy(net.state_dict())
    args = types.SimpleNamespace(gpu=None, num_classes=C, dataset="cifar10", num_train_iter=10 * STEPS, amp=False,
                                 multiprocessing_distributed=False, save_dir=".", save_name="rda")
    with mock.patch.object(torch.Tensor, "cuda", lambda t, *a, **k: t), \
            mock.patch.object(nn.Module, "cuda", lambda m, *a, **k: m), \
            mock.patch.object(torch.cuda, "Event", Event), mock.patch.object(torch.cuda, "synchronize", lambda: None), \
            mock.patch.object(torch.cuda, "device_count", lambda: 1), \
            mock.patch.object(rda_module, "ce_loss", recording_ce), \
            mock.patch.object(utils_module, "ce_loss", recording_consistency), \
            mock.patch.object(model, "evaluate", lambda **k: {"eval/top-1-acc": 0.0}), \
            mock.patch.object(model, "save_model", lambda *a: None):
        model.train(args)
    assert len(steps) == STEPS and all("grads" in s for s in steps), "every step ran once"
    return {"initial_state": initial, "final_state": copy.deepcopy(net.state_dict()),
            "losses": {k: torch.tensor([s[k] for s in steps], dtype=torch.float64)
                       for k in ("train/sup_loss", "train/reverse_loss", "train/unsup_loss_cd",
                                 "train/unsup_loss_ca", "train/total_loss")},
            **{k: torch.stack([s[k] for s in steps]) for k in ("comp_label", "pseudo_label", "ca_target")},
            **stacked_parts(steps)}


def counts(labels: np.ndarray, num_classes: int) -> list[int]:
    return np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes).tolist()


def splits(data_utils) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:   # it appends dist&index.txt to the save path
        def draw(dataset, num_labels, mismatch, n0, gamma):
            num_classes, per_class = {"cifar10": (10, 5000), "cifar100": (100, 500)}[dataset]
            target = np.repeat(np.arange(num_classes), per_class)
            np.random.seed(0)
            _, lbs, _, ulbs, _ = data_utils.split_ssl_data(dataset, np.zeros((len(target), 1)), target, num_labels,
                                                          num_classes, tmp, None, False, mismatch=mismatch, n0=n0,
                                                          gamma=gamma)
            out.append({"dataset": dataset, "num_labels": num_labels, "mismatch": mismatch, "n0": n0, "gamma": gamma,
                        "labeled": counts(lbs, num_classes), "unlabeled": counts(ulbs, num_classes)})
        for dataset, (n0s, gammas) in DARP_GRID.items():
            for mismatch in ("darp", "darp_reversed"):
                for n0 in n0s:
                    for gamma in gammas:
                        draw(dataset, {"cifar10": 10, "cifar100": 100}[dataset], mismatch, n0, gamma)
        for dataset, num_labels, n0, gamma in RDA_SETTINGS:
            draw(dataset, num_labels, "rda", n0, gamma)
    return out


def main() -> None:
    repo, commit = reference_checkout(__doc__.split("\n\n")[0], "a checkout of github.com/NJUyued/RDA4RobustSSL")
    sys.path.insert(0, str(repo))
    sys.modules.setdefault("torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=None))  # train_utils' import
    import models.rda.rda as rda_module        # noqa: E402  (from the checkout)
    import models.rda.rda_utils as utils_module  # noqa: E402
    import datasets.data_utils as data_utils   # noqa: E402
    golden = {"commit": commit, "command": "python tests/mutexmatch/algorithms/golden/make_rda.py "
              "<checkout of NJUyued/RDA4RobustSSL>", "torch": str(torch.__version__), "numpy": np.__version__,
              "views": views(torch.Generator().manual_seed(1)),
              "config": {"steps": STEPS, "lr": LR, "batch": B, "mu": MU, "d_in": D_IN, "width": WIDTH,
                         "num_classes": C, "lambda_u": 1.0},
              "train": train(rda_module, utils_module), "splits": splits(data_utils)}
    torch.save(golden, OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes) from NJUyued/RDA4RobustSSL@{commit}")


if __name__ == "__main__":
    main()
