"""Makes ``tras_official.pt``, the golden record of TRAS's official code (Stomach-ache/TRAS, ``train.py``) that
tests/mutexmatch/imb_algorithms/test_tras_official.py compares our ``imb_algorithm: {name: tras, form: official}``
with. Run once, by hand, against a checkout (or ``git archive`` export) of the official repository (never copied
here: its ``train.py`` is imported from that checkout):

    python tests/mutexmatch/algorithms/golden/make_tras_official.py /path/to/TRAS [--commit SHA]

It drives the official ``train`` (one call per step, ``--val-iteration 1``, epoch 11: past its ``epoch > 10``
warm-up) on a tiny model with that code's interface (``model(x)`` the features: Linear + tanh; ``classify`` the
TPC, ``classify2`` the auxiliary head, both linear with logits x10 so the 0.95 masks mix), its batch of 64 labeled
and 64 unlabeled images (its ``la_u`` expands to 128 = its two strong views; here the second strong view is the
first again, as ours draws one), fixed views, long-tailed labels (50, 20, 8, 2 of the 80 labeled rows a class),
``compute_adjustment`` over those labels (tro 1) and the official ``T_logit`` (A = B = 2), plain SGD (lr 0.02)
for 10 steps. ``Tensor.cuda``/``Module.cuda`` are the identity, ``progress.bar`` a stub (it runs on the CPU; its
DataLoader iterators' Python-2 ``.next()`` is given). Recorded per step: L_x, L_u and the TRAS loss as ``train``
returns them, the mask and the target the official ``KL`` receives, every gradient; once: the views, the weights.
"""
from __future__ import annotations

import copy
import sys
import types
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from torch import nn
from reference import reference_checkout, stacked_parts  # this folder's (the script's own)

STEPS, LR, B, D_IN, WIDTH, C, SCALE = 10, 0.02, 64, 6, 8, 4, 10.0
COUNTS = (50, 20, 8, 2)
OUT = Path(__file__).with_name("tras_official.pt")


class Net(nn.Module):
    """The official code's model interface: ``model(x)`` the features, ``classify``/``classify2`` the two heads."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.fc, self.fc2 = nn.Linear(D_IN, WIDTH), nn.Linear(WIDTH, C), nn.Linear(WIDTH, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.body(x))

    def classify(self, q: torch.Tensor) -> torch.Tensor:
        return SCALE * self.fc(q)

    def classify2(self, q: torch.Tensor) -> torch.Tensor:
        return SCALE * self.fc2(q)


def views(g: torch.Generator) -> dict[str, torch.Tensor]:
    """Per step: 64 labeled rows drawn from the long-tailed labeled set, 64 unlabeled rows (weak, strong)."""
    means = 1.5 * torch.randn(C, D_IN, generator=g)
    labeled = torch.repeat_interleave(torch.arange(C), torch.tensor(COUNTS))
    y = labeled[torch.stack([torch.randperm(len(labeled), generator=g)[:B] for _ in range(STEPS)])]
    yu = torch.randint(C, (STEPS, B), generator=g)
    xu = means[yu] + torch.randn(STEPS, B, D_IN, generator=g)
    return {"labeled_y": labeled, "x_lb": means[y] + 0.3 * torch.randn(STEPS, B, D_IN, generator=g), "y_lb": y,
            "x_w": xu + 0.1 * torch.randn(xu.shape, generator=g), "x_s": xu + 0.8 * torch.randn(xu.shape, generator=g)}


class OneBatch:
    """A loader of one batch whose iterator has the Python-2 ``.next()`` the official loop calls."""

    def __init__(self, batch: tuple) -> None:
        self.batch = batch

    def __iter__(self) -> "OneBatch":
        return self

    def __next__(self) -> tuple:
        return self.batch

    def next(self) -> tuple:
        return self.batch


class Bar:
    elapsed_td = eta_td = 0

    def __init__(self, *a, **k) -> None:
        self.suffix = ""

    def next(self) -> None:
        pass

    def finish(self) -> None:
        pass


def load_official(repo: Path) -> types.ModuleType:
    """The official ``train.py`` as a module (its argparse reads ``--val-iteration 1``)."""
    sys.path.insert(0, str(repo))
    progress = types.ModuleType("progress")
    progress.bar = types.SimpleNamespace(Bar=Bar)
    sys.modules.update({"progress": progress, "progress.bar": progress.bar})
    sys.argv = ["train.py", "--val-iteration", "1", "--A", "2", "--B", "2", "--tro_train", "1.0"]
    import train as official        # noqa: E402  (from the checkout)
    return official


def run(official: types.ModuleType) -> dict:
    torch.manual_seed(0)
    data = views(torch.Generator().manual_seed(1))
    args = official.args
    args.device = torch.device("cpu")
    official.num_class = C                 # its module global (10 for --dataset cifar10)
    args.logit_adjustments = official.compute_adjustment([(None, data["labeled_y"], None)], args.tro_train, args)
    t_logit = args.A * torch.softmax((-args.logit_adjustments) / 1, dim=0) + args.B    # its main()'s T_logit
    net = Net()
    initial = copy.deepcopy(net.state_dict())
    steps: list[dict] = []

    class Optimizer(torch.optim.SGD):
        def step(self, closure=None):
            steps[-1]["grads"] = {n: p.grad.clone() for n, p in net.named_parameters()}
            steps[-1]["buffers"] = {"none": torch.zeros(())}
            return super().step(closure)

    kl = official.KL

    def recording_kl(outputs, targets, T, mask):
        steps[-1].update(kl_mask=mask.clone(), kl_target=targets.clone())
        return kl(outputs, targets, T, mask)

    optimizer = Optimizer(net.parameters(), lr=LR)
    with mock.patch.object(torch.Tensor, "cuda", lambda t, *a, **k: t), \
            mock.patch.object(nn.Module, "cuda", lambda m, *a, **k: m), \
            mock.patch.object(official, "KL", recording_kl):
        for t in range(STEPS):
            steps.append({})
            lb = OneBatch((data["x_lb"][t], data["y_lb"][t], None))
            ulb = OneBatch(((data["x_w"][t], data["x_s"][t], data["x_s"][t]), torch.zeros(B, dtype=torch.long),
                            None))
            _, lx, lu, tras, _ = official.train(t_logit, lb, ulb, net, optimizer, types.SimpleNamespace(step=lambda: None),
                                                official.SemiLoss(), 11)
            steps[-1].update(lx=lx, lu=lu, tras=tras)
    return {"initial_state": initial, "final_state": copy.deepcopy(net.state_dict()), "t_logit": t_logit,
            "la": args.logit_adjustments.clone(),
            "losses": {k: torch.tensor([s[k] for s in steps], dtype=torch.float64) for k in ("lx", "lu", "tras")},
            **{k: torch.stack([s[k] for s in steps]) for k in ("kl_mask", "kl_target")},
            **stacked_parts(steps)}


def main() -> None:
    repo, commit = reference_checkout(__doc__.split("\n\n")[0], "a checkout of github.com/Stomach-ache/TRAS")
    official = load_official(repo)
    golden = {"commit": commit, "command": "python tests/mutexmatch/algorithms/golden/make_tras_official.py "
              "<checkout of Stomach-ache/TRAS>", "torch": str(torch.__version__), "numpy": np.__version__,
              "views": views(torch.Generator().manual_seed(1)),
              "config": {"steps": STEPS, "lr": LR, "batch": B, "d_in": D_IN, "width": WIDTH, "num_classes": C,
                         "scale": SCALE, "counts": COUNTS, "A": 2, "B": 2, "tro": 1.0, "tau": 0.95},
              "train": run(official)}
    torch.save(golden, OUT)


if __name__ == "__main__":
    main()
