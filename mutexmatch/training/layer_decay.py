"""USB's parameter groups for AdamW fine-tuning (``optim.name: adamw``): weight decay and layer-wise learning-rate
decay as semilearn 0.3.2's ``get_optimizer`` builds them (``semilearn/nets/utils.py``, after timm and BEiT).

* ``optim.layer_decay`` = 1: two groups, USB's ``param_groups_weight_decay``: no decay for 1-D parameters, biases
  and the backbone's ``no_weight_decay()`` names (a ViT's ``pos_embed`` and ``cls_token``), in that order
  (``[no_decay, decay]``), both at the base learning rate.
* ``optim.layer_decay`` = d < 1: USB's ``param_groups_layer_decay``: every parameter gets a layer id from the
  backbone's ``group_matcher()`` (a ViT: the stem ``cls_token``/``pos_embed``/``patch_embed`` is layer 0, block N
  layer N + 1, the final ``norm`` joins the last block, the classifier and every other head the layer after it),
  learning rate ``lr * d ** (L - 1 - id)`` for L layers; no decay for 1-D parameters and the ``no_weight_decay()``
  names. One group per (layer, decay), in the order of first appearance.

Names are the backbone's own (``pos_embed``, ``blocks.3.attn.qkv.weight``), as USB's ViT is the whole model in
FixMatch and its kin; the TNC and an algorithm's extra heads (``tnc.weight``, ``heads.*``) are outside the backbone
and sit in the top layer, as USB's unmatched head parameters do. (USB's wrapped nets, e.g. CoMatch's, lose the
``pos_embed``/``cls_token`` exemption because the wrapper has no ``no_weight_decay``; we keep it for every algorithm.)
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping

from torch import nn

__all__ = ["LayerDecayError", "usb_param_groups", "layer_ids"]

# A matcher's suffix that merges a group into the one before it (timm's MATCH_PREV_GROUP: a ViT's final norm).
_MATCH_PREV = 99999.0
_HEAD = (float("inf"),)


class LayerDecayError(ValueError):
    """``optim.layer_decay`` < 1 for a backbone that declares no layers (no ``group_matcher``)."""


def layer_ids(names: Iterable[str], matcher: Mapping[str, object], outside: Iterable[str] = ()) -> dict[str, int]:
    """Layer id of every name under a timm/USB ``group_matcher`` dict (``group_with_matcher(reverse=True)``): each
    name is keyed by (group ordinal, regex groups as numbers, suffix); unmatched names, and the ``outside`` ones
    (heads outside the backbone), key last; the sorted keys are numbered from 0, a key ending in the MATCH_PREV
    suffix sharing the number of the key before it."""
    compiled: list[tuple[re.Pattern, tuple[float, ...], tuple | None]] = []
    for ordinal, spec in enumerate(matcher.values()):
        if spec is None:
            continue
        for regex, suffix in (spec if isinstance(spec, (list, tuple)) else [(spec, None)]):
            compiled.append((re.compile(regex), (float(ordinal),), suffix))

    def key(name: str) -> tuple[float, ...]:
        for regex, prefix, suffix in compiled:
            m = regex.match(name)
            if m:
                return (*prefix, *(float(g) for g in m.groups() if g is not None),
                        *(float(s) for s in suffix or ()))
        return _HEAD

    grouping: dict[tuple[float, ...], list[str]] = defaultdict(list)
    for name in names:
        grouping[key(name)].append(name)
    grouping[_HEAD].extend(outside)
    ids, lid = {}, -1
    for k in sorted(k for k, v in grouping.items() if v):
        if lid < 0 or k[-1] != _MATCH_PREV:
            lid += 1
        ids.update({n: lid for n in grouping[k]})
    return ids


def _named(model: nn.Module) -> list[tuple[str, nn.Parameter, bool]]:
    """(name, parameter, in the backbone) of every trainable parameter of a MutexNet (``model.backbone``), the
    backbone's named as the backbone names them (``pos_embed``, not ``backbone.pos_embed``); of a bare backbone,
    every parameter in it."""
    backbone = getattr(model, "backbone", None)
    if backbone is None:
        return [(n, p, True) for n, p in model.named_parameters() if p.requires_grad]
    inside = {id(p): n for n, p in backbone.named_parameters()}
    return [(inside.get(id(p), n), p, id(p) in inside) for n, p in model.named_parameters() if p.requires_grad]


def usb_param_groups(model: nn.Module, lr: float, weight_decay: float, layer_decay: float) -> list[dict]:
    """USB's parameter groups of ``model`` (a :class:`~mutexmatch.models.net.MutexNet`, or a bare backbone).

    Raises :class:`LayerDecayError` for ``layer_decay`` < 1 on a backbone without ``group_matcher``: USB's fallback
    puts every parameter in one layer there, a decay that silently does nothing."""
    backbone = getattr(model, "backbone", model)
    no_wd = set(backbone.no_weight_decay()) if hasattr(backbone, "no_weight_decay") else set()
    named = _named(model)
    if layer_decay == 1.0:
        skip = [p.ndim <= 1 or n.endswith(".bias") or (inside and n in no_wd) for n, p, inside in named]
        return [{"params": [p for (_, p, _), s in zip(named, skip) if s], "weight_decay": 0.0},
                {"params": [p for (_, p, _), s in zip(named, skip) if not s], "weight_decay": weight_decay}]
    if not hasattr(backbone, "group_matcher"):
        raise LayerDecayError(f"optim.layer_decay={layer_decay:g}: backbone {type(backbone).__name__} declares no "
                              "layers (group_matcher) to decay by; use a ViT backbone or optim.layer_decay 1")
    ids = layer_ids([n for n, _, inside in named if inside], backbone.group_matcher(coarse=False),
                    outside=[n for n, _, inside in named if not inside])
    num_layers = max(ids.values()) + 1
    groups: dict[str, dict] = {}
    for n, p, inside in named:
        decayed = not (p.ndim == 1 or (inside and n in no_wd))
        lid = ids[n] if inside else num_layers - 1
        group = groups.setdefault(f"layer_{lid}_{'decay' if decayed else 'no_decay'}", {
            "lr": layer_decay ** (num_layers - 1 - lid) * lr, "weight_decay": weight_decay if decayed else 0.0,
            "params": []})
        group["params"].append(p)
    return list(groups.values())
