"""Makes ``usb_after_032.pt``, the golden record of algorithms USB added after semilearn 0.3.2 (not on PyPI) that
tests/mutexmatch/algorithms/usb/test_usb_after_032_golden.py compares ours with. Run once, by hand, against an
export of microsoft/Semi-supervised-learning (its ``semilearn`` package is imported from there, never copied here):

    python tests/mutexmatch/algorithms/golden/make_usb_after_032.py /path/to/Semi-supervised-learning [--commit SHA]

Each algorithm's ``train_step`` runs through the USB lockstep harness's own pieces (tests/mutexmatch/algorithms/usb/
conftest.py: ``TinyNet`` with BatchNorm, ``build_usb``, ``Data``, ``_usb_step``) on fixed weights and views, with
plain SGD, for ``STEPS`` steps. Recorded: the initial weights and the views; per step the loss, USB's log, the mask
and pseudo-labels its hooks returned, every gradient and the BatchNorm statistics after the step's forward.
"""
from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import torch
from reference import reference_checkout, stacked_parts  # this folder's (the script's own)

HERE = Path(__file__).resolve().parent
OUT = HERE / "usb_after_032.pt"
STEPS, SCALE = 10, 3.0
NEWER_STUBS = ("timm.models.layers.helpers",)   # what the newer semilearn imports beyond 0.3.2's, unused by a step
RUNS = {  # our name: (USB's name, USB's arguments, the harness's extra views)
    "refixmatch": ("refixmatch", {"p_cutoff": 0.8, "ulb_loss_ratio": 0.7, "hard_label": True}, {}),
    "sequencematch": ("sequencematch", {"p_cutoff": 0.8, "ulb_loss_ratio": 0.7, "hard_label": True, "T": 0.5,
                                        "thresh_warmup": True}, {"medium": True}),
}
# USB's SequenceMatch.train_step reads a name it never sets (feat_dict, in process_out_dict): a module global of
# that name lets it finish; nothing else reads it here.
MISSING_NAMES = {"sequencematch": "semilearn.algorithms.sequencematch.sequencematch"}


def harness():
    spec = importlib.util.spec_from_file_location("usb_harness", HERE.parent / "usb" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def record(h, usb_name: str, args: dict, views_wanted: dict) -> dict:
    cfg = h.Lockstep(steps=STEPS, batchnorm=True, **views_wanted)
    if usb_name in MISSING_NAMES:
        setattr(sys.modules[MISSING_NAMES[usb_name]], "feat_dict", None)
    torch.manual_seed(cfg.seed)
    net = h.TinyNet(cfg.d_in, cfg.width, cfg.num_classes, SCALE, cfg.batchnorm)
    usb_net = h.UsbNet(net)
    initial = copy.deepcopy(net.state_dict())
    usb = h.build_usb(usb_name, usb_net, args, num_classes=cfg.num_classes, ulb_size=cfg.ulb_size,
                      lb_size=cfg.lb_size, total_steps=STEPS)
    selected = None
    if "MaskingHook" in usb.hooks_dict and hasattr(usb.hooks_dict["MaskingHook"], "selected_label"):
        # FlexMatch's thresholds mid-run (from the start every threshold is 0): the unused samples the biggest
        # bucket, the rest selected with skewed class counts, as test_flexmatch_lockstep.py prepares both sides
        g = torch.Generator().manual_seed(cfg.seed + 2)
        weights = torch.tensor([6.0, 1.0, 4.0, 2.0, 3.0])[:cfg.num_classes + 1]
        selected = torch.multinomial(weights, cfg.ulb_size, True, generator=g) - 1
        hook = usb.hooks_dict["MaskingHook"]
        hook.selected_label = selected.clone()
        hook.update()
    data, steps, views = h.Data(cfg, cfg.seed + 1), [], []
    for t in range(STEPS):
        v = data.next()
        views.append(v)
        loss, log, hooks = h._usb_step(usb, v, cfg.seed + 100 + t)
        loss.backward()
        steps.append({"loss": loss.detach(), "log": {k: float(x) for k, x in log.items()},
                      "mask": hooks["masking"], "pseudo_label": hooks["gen_ulb_targets"],
                      "grads": {n: p.grad.clone() for n, p in net.named_parameters()},
                      "buffers": {n: b.clone() for n, b in net.named_buffers()}})
        h._sgd(usb_net, cfg.lr)
    stack = lambda key: torch.stack([s[key] for s in steps])   # noqa: E731
    return {"config": {"steps": STEPS, "scale": SCALE, "lr": cfg.lr, "num_classes": cfg.num_classes,
                       "d_in": cfg.d_in, "width": cfg.width, "ulb_size": cfg.ulb_size, "lb_size": cfg.lb_size,
                       "usb_name": usb_name, "usb_args": args},
            "initial_state": initial, "final_state": copy.deepcopy(net.state_dict()),
            **({} if selected is None else {"initial_selected": selected}),
            "views": {k: torch.stack([getattr(v, k) for v in views]) for k in ("x_lb", "y_lb", "idx_lb", "idx_ulb",
                                                                                "x_ulb_w", "x_ulb_s", "x_ulb_m")
                      if getattr(views[0], k) is not None},
            "loss": stack("loss"), "mask": stack("mask"), "pseudo_label": stack("pseudo_label"),
            "log": {k: [s["log"][k] for s in steps] for k in steps[0]["log"]},
            **stacked_parts(steps)}


def main() -> None:
    repo, commit = reference_checkout(__doc__.split("\n\n")[0],
                                      "an export of github.com/microsoft/Semi-supervised-learning")
    sys.path.insert(0, str(repo))   # its semilearn, not the installed 0.3.2
    h = harness()
    h.STUBBED = h.STUBBED + NEWER_STUBS
    core = h.import_semilearn()
    assert Path(core.__file__).is_relative_to(repo.resolve()), f"semilearn imported from {core.__file__}"
    golden = {"commit": commit, "command": "python tests/mutexmatch/algorithms/golden/make_usb_after_032.py "
              f"<export of microsoft/Semi-supervised-learning> --commit {commit}", "torch": str(torch.__version__),
              **{name: record(h, usb_name, args, extra) for name, (usb_name, args, extra) in RUNS.items()}}
    torch.save(golden, OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes) from microsoft/Semi-supervised-learning@{commit}")


if __name__ == "__main__":
    main()
