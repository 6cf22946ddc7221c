"""Makes ``shrinkmatch.pt``, the golden record of ShrinkMatch's official CIFAR code (LiheYoung/ShrinkMatch) that
tests/mutexmatch/algorithms/test_shrinkmatch.py compares ours with. Run once, by hand, against a checkout of the
official repository (never copied here: its modules are imported from that checkout):

    python tests/mutexmatch/algorithms/golden/make_shrinkmatch.py /path/to/ShrinkMatch [--commit SHA]

It drives the official ``train`` (CIFAR/shrinkmatch.py) and ``ShrinkMatch`` model (CIFAR/network/shrinkmatch.py)
on a tiny encoder (Linear, BatchNorm1d, tanh) with fixed weights and fixed views: 12 steps in 3 epochs of 4 steps
(the confident-ratio EMA restarts at each), plain SGD (lr 0.05), threshold 0.7, 10 classes, once without and once
with ``--DA``. ``Tensor.cuda`` is the identity and the world size 1 (it runs on the CPU). Recorded per step: the
losses the official meters log, the soft pseudo-labels (after DA), the removed-class indices ``shrink_loss``
returns, every gradient and the BatchNorm statistics after the step's forward; once: the views, the encoder's
initial and final state. The official ``momentum_update_ema`` runs before each forward as in the original (its EMA copy is not
recorded: it does not reach the loss).
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path
from unittest import mock

import torch
from torch import nn
from reference import reference_checkout, stacked_parts  # this folder's (the script's own)

STEPS, EPOCH, LR, TAU = 12, 4, 0.05, 0.7
B, MU, D_IN, WIDTH, C = 4, 4, 8, 16, 10
OUT = Path(__file__).with_name("shrinkmatch.pt")


class Encoder(nn.Module):
    """The tiny base encoder (the official BackBone reads ``out_dim``)."""

    def __init__(self) -> None:
        super().__init__()
        self.out_dim = WIDTH
        self.body = nn.Sequential(nn.Linear(D_IN, WIDTH), nn.BatchNorm1d(WIDTH), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class Recorder:
    def __init__(self) -> None:
        self.steps: list[dict] = []

    def meter(self, recorder: "Recorder"):
        class Meter:   # the official AverageMeter's interface; keeps every value by name
            def __init__(self, name: str, fmt: str) -> None:
                self.name = name

            def update(self, val, n=1) -> None:   # the loss meters, updated after the step's forward
                if self.name.startswith(("Loss", "Removed", "Mask")):
                    recorder.steps[-1][f"meter/{self.name}"] = float(torch.as_tensor(val).detach())
        return Meter


def views(g: torch.Generator) -> list[dict]:
    means = 2.0 * torch.randn(C, D_IN, generator=g)
    out = []
    for _ in range(STEPS):
        y = torch.randint(C, (B,), generator=g)
        yu = torch.randint(C, (B * MU,), generator=g)
        xu = means[yu] + torch.randn(B * MU, D_IN, generator=g)
        out.append({"x_lb": means[y] + 0.1 * torch.randn(B, D_IN, generator=g), "y_lb": y,
                    "x_w": xu + 0.1 * torch.randn(xu.shape, generator=g),
                    "x_s": xu + 0.8 * torch.randn(xu.shape, generator=g)})
    return out


def run(official, net_module, da: bool) -> dict:
    official.args.DA, official.args.threshold = da, TAU
    torch.manual_seed(0)
    model = net_module.ShrinkMatch(Encoder(), num_classes=C, args=official.args)
    with torch.no_grad():   # peaked predictions: some rows confident, shrunk spaces of several sizes
        model.encoder_q.fc.weight.mul_(6.0)
        model.ema.load_state_dict(model.encoder_q.state_dict())
    data = views(torch.Generator().manual_seed(1))   # the same views in both runs
    rec = Recorder()
    forward, shrink = model.forward, official.shrink_loss

    def recording_forward(*args, **kwargs):
        rec.steps.append({})
        return forward(*args, **kwargs)

    def recording_shrink(pseudo_label, logits_u_s, conf_thresh):
        loss, removed = shrink(pseudo_label, logits_u_s, conf_thresh)
        rec.steps[-1].update({"pseudo_label": pseudo_label.clone(), "removed": list(removed),
                              "loss_shrink_sum": torch.as_tensor(loss).detach().clone()})
        return loss, removed

    class Optimizer(torch.optim.SGD):
        def step(self, closure=None):
            rec.steps[-1]["grads"] = {n: p.grad.clone() for n, p in model.encoder_q.named_parameters()
                                      if p.grad is not None}
            rec.steps[-1]["buffers"] = {n: b.clone() for n, b in model.encoder_q.named_buffers()}   # after forward
            return super().step(closure)

    class Loader:
        def __init__(self, epoch_batches):
            self.sampler = mock.Mock()
            self.batches = epoch_batches

        def __iter__(self):
            return iter(self.batches)

    optimizer = Optimizer(model.encoder_q.parameters(), lr=LR)
    initial = copy.deepcopy(model.encoder_q.state_dict())
    model.forward = recording_forward
    with mock.patch.object(torch.Tensor, "cuda", lambda t, *a, **k: t), \
            mock.patch.object(torch.distributed, "get_world_size", lambda *a, **k: 1), \
            mock.patch.object(official, "shrink_loss", recording_shrink), \
            mock.patch.object(official, "AverageMeter", rec.meter(rec)), \
            mock.patch.object(official, "ProgressMeter", mock.Mock()):
        for epoch in range(STEPS // EPOCH):
            part = data[epoch * EPOCH:(epoch + 1) * EPOCH]
            lx = Loader([(v["x_lb"], v["y_lb"], torch.arange(B)) for v in part])
            lu = Loader([((v["x_w"], v["x_s"]), torch.zeros(B * MU, dtype=torch.long)) for v in part])
            official.train(model, optimizer, mock.Mock(), lx, lu, epoch, EPOCH, 0, None, 1, mock.Mock())
    steps = rec.steps   # stacked over the steps (one tensor per name keeps the file small)
    return {"initial_state": initial, "final_state": copy.deepcopy(model.encoder_q.state_dict()),
            "removed": [s["removed"] for s in steps],
            "pseudo_label": torch.stack([s["pseudo_label"] for s in steps]),
            "loss_shrink_sum": torch.stack([s["loss_shrink_sum"].float() for s in steps]),
            "meters": {k: [s[k] for s in steps] for k in steps[0] if k.startswith("meter/")},
            **stacked_parts(steps)}


def main() -> None:
    repo, commit = reference_checkout(__doc__.split("\n\n")[0], "a checkout of github.com/LiheYoung/ShrinkMatch")
    sys.path.insert(0, str(repo / "CIFAR"))
    sys.argv = ["shrinkmatch.py"]            # the official script parses its arguments at import
    import shrinkmatch as official           # noqa: E402  (CIFAR/shrinkmatch.py, from the checkout)
    import network.shrinkmatch as net_module  # noqa: E402
    golden = {"commit": commit, "command": f"python tests/mutexmatch/algorithms/golden/make_shrinkmatch.py "
              "<checkout of LiheYoung/ShrinkMatch>", "torch": str(torch.__version__),
              "views": {k: torch.stack([v[k] for v in views(torch.Generator().manual_seed(1))])
                        for k in ("x_lb", "y_lb", "x_w", "x_s")},
              "config": {"steps": STEPS, "epoch": EPOCH, "lr": LR, "tau": TAU, "batch": B, "mu": MU, "d_in": D_IN,
                         "width": WIDTH, "num_classes": C},
              "plain": run(official, net_module, da=False), "da": run(official, net_module, da=True)}
    torch.save(golden, OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes) from LiheYoung/ShrinkMatch@{commit}")


if __name__ == "__main__":
    main()
