"""DebiasPL's paper form against the authors' update (frank-xwang/debiased-pseudo-labeling, main_DebiasPL.py:
pseudo-labels softmax(z^w - tau log q) with the prior q of the step's start, then q <- m q + (1 - m) mean
softmax(z^w), then the margin CE(z^s + tau log q, .) with the updated q), written out here step by step; and the class
prior moves in both forms (issue 41 said USB's stays at 1/C: in semilearn 0.3.2 composed with FixMatch it does not,
test_debiaspl_lockstep.py compares it with USB's every step)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch.algorithms import StepInputs, TrainContext
from mutexmatch.imb_algorithms import compose

C, B, U, D = 4, 4, 16, 8


class _Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(D, C)

    def tpc(self, feats):
        return 2 * self.fc(feats)


def _steps(form: str, steps: int = 4):
    torch.manual_seed(0)
    model = _Head()
    with torch.no_grad():
        model.fc.bias.copy_(torch.tensor([1.0, 0.3, 0.0, -0.5]))     # predictions skewed to class 0
    alg = compose("debiaspl", "fixmatch", {"form": form, "tau": 1.0, "ema_p": 0.9})(
        {"tau": 0.6}, TrainContext.synthetic(C, 64))
    g = torch.Generator().manual_seed(1)
    out = []
    for step in range(steps):
        feats = torch.randn(B + 2 * U, D, generator=g)
        inp = StepInputs(feats=feats, num_lb=B, num_ulb=U, targets_lb=torch.arange(B) % C,
                         ulb_idx=torch.arange(U), step=step)
        out.append((feats, alg.compute(model, inp), alg.p_hat.clone()))
    return model, out


def test_paper_form_is_the_authors_update():
    model, out = _steps("paper")
    q, tau, m = torch.full((C,), 1 / C), 1.0, 0.9
    for feats, res, p_hat in out:
        _, z_w, z_s = model.tpc(feats).detach().split([B, U, U])
        pseudo = torch.softmax(z_w - tau * torch.log(q), dim=1)       # the debiased pseudo-label, q before update
        conf, label = pseudo.max(dim=1)
        mask = conf.ge(0.6).float()
        q = m * q + (1 - m) * torch.softmax(z_w, dim=1).mean(dim=0)    # then the prior's update
        loss_u = (F.cross_entropy(z_s + tau * torch.log(q), label, reduction="none") * mask).mean()
        torch.testing.assert_close(p_hat, q)
        assert torch.equal(res.pseudo_label, label) and torch.equal(res.mask, mask)
        torch.testing.assert_close(res.terms["p"], loss_u)
    assert 0 < torch.cat([r.mask for _, r, _ in out]).mean() < 1


def test_the_prior_moves_in_both_forms_towards_the_skewed_predictions():
    for form in ("paper", "usb"):
        _, out = _steps(form, steps=6)
        priors = torch.stack([p for _, _, p in out])
        assert not torch.allclose(priors[-1], torch.full((C,), 1 / C)), form
        assert bool((priors[1:, 0] > priors[:-1, 0]).all()), form      # class 0, the favoured one, grows


def test_the_forms_differ_where_usb_fixes_the_margin_at_0_4():
    (_, paper), (_, usb) = _steps("paper"), _steps("usb")
    assert any(not torch.allclose(a.terms["p"], b.terms["p"]) for (_, a, _), (_, b, _) in zip(paper, usb))
