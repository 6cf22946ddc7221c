"""Weight files a backbone starts from (``model.pretrained``), read and loaded by USB's rules.

USB (semilearn 0.3.2, ``nets/utils.py``'s ``load_checkpoint``) fine-tunes from a file holding ``{'model': state_dict}``:
it strips a leading ``module`` name component (a DistributedDataParallel save), drops the old classifier (every key
starting with ``fc``, ``classifier``, ``mlp`` or ``head``), resizes ``pos_embed`` bicubically to the model's grid
(``resize_pos_embed_vit``: the class token kept, the square grid interpolated, ``align_corners=False``) and loads the
rest with ``strict=False``. :func:`load_pretrained` does the same, and also reads plain state dicts (timm's and
torchvision's files) and ``.safetensors`` files (with the ``safetensors`` package, imported only for them); it
refuses, in one line naming the tensor, a tensor whose shape is not the model's (USB's ``load_state_dict`` raises
there too) and a file none of whose tensors the model has (another architecture); it reports the model's tensors the
file leaves at their initial values and the file's tensors the model has no place for, one line each.

A file is identified by its sha256 (:func:`file_digest`): the config holds it (``model.pretrained_sha256``, computed
from the file when not given), it joins the config hash, and the bytes loaded are checked against it. Files are read
with ``torch.load(weights_only=True)``: tensors and plain containers only, no code.
"""
from __future__ import annotations

import hashlib
import io
import math
import os
import re
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch.checksum import sha256_file

__all__ = ["PretrainedError", "checked_digest", "checked_file", "file_digest", "load_pretrained",
           "pretrained_errors", "read_weights", "resize_pos_embed", "usb_state_dict"]

# USB's load_checkpoint drops every key that starts with one of these: the old task's classifier
DROPPED_PREFIXES = ("fc", "classifier", "mlp", "head")
_SHOWN = 4   # keys named in a report line before "… (N more)"


class PretrainedError(ValueError):
    """A weight file that cannot start this backbone; the message is one line naming the field and the tensor."""


@lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(Path(path))


def file_digest(path: str | Path) -> str:
    """The sha256 of the file at ``path`` (cached while its size and modification time stay the same: a config is
    validated many times by a sweep)."""
    st = os.stat(path)
    return _digest(str(path), st.st_size, st.st_mtime_ns)


def checked_file(path: str | None, sha256: str | None) -> dict[str, str | None]:
    """``model.pretrained`` and ``model.pretrained_sha256`` as the config holds them: the path made absolute (Ray
    trials run in a temporary folder) and :func:`checked_digest`."""
    path = None if path is None else str(Path(path).expanduser().resolve())
    return {"pretrained": path, "pretrained_sha256": checked_digest(path, sha256)}


def checked_digest(path: str | None, sha256: str | None) -> str | None:
    """``model.pretrained_sha256`` as the config holds it: the file's digest, checked against the one given; the
    one given where the file is not here (a stored run's config read elsewhere: the trainer's load refuses to start
    without it); None without a file.

    Raises:
        PretrainedError: a digest that is not 64 hex digits or has no file, a file that is missing (with no digest
            given) or not a file, a digest that is not the file's.
    """
    if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise PretrainedError(f"model.pretrained_sha256={sha256!r}: must be 64 hexadecimal digits (sha256sum's "
                              "output) or null (computed from the file)")
    sha256 = None if sha256 is None else sha256.lower()
    if path is None:
        if sha256 is not None:
            raise PretrainedError(f"model.pretrained_sha256={sha256}: is the digest of model.pretrained, which is "
                                  "null: name the weight file there, or remove the digest")
        return None
    if not os.path.exists(path):
        if sha256 is None:
            raise PretrainedError(f"model.pretrained={path}: no such file (the weight file the backbone starts "
                                  "from; null = random initialisation)")
        return sha256
    if not os.path.isfile(path):
        raise PretrainedError(f"model.pretrained={path}: not a file (name the weight file itself)")
    digest = file_digest(path)
    if sha256 is not None and digest != sha256:
        raise PretrainedError(f"model.pretrained={path}: its sha256 is {digest}, model.pretrained_sha256 says "
                              f"{sha256}: not the file the config names (replaced or changed); use the right file "
                              "or its digest")
    return digest


def read_weights(path: str | Path, sha256: str | None = None) -> tuple[dict[str, torch.Tensor], str]:
    """The tensors of a weight file (USB's ``{'model': state_dict}``, a plain state dict, or ``.safetensors``) and
    the sha256 of its bytes, checked against ``sha256`` (when given) before they are parsed.

    Raises:
        PretrainedError: no such file, another digest, a ``.safetensors`` file without the package, or a file
            that holds no state dict.
    """
    where = f"model.pretrained={path}"
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise PretrainedError(f"{where}: cannot be read ({e.strerror or e})") from None
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and digest != sha256:
        raise PretrainedError(f"{where}: its sha256 is {digest}, model.pretrained_sha256 says {sha256}: not the "
                              "file the config names (replaced or changed); use the right file or its digest")
    if str(path).endswith(".safetensors"):
        return _safetensors(where, data), digest
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:   # weights_only refuses pickled code; a truncated or foreign file fails to parse
        raise PretrainedError(f"{where}: not a weight file torch.load(weights_only=True) reads "
                              f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    state = obj.get("model", obj) if isinstance(obj, dict) else obj
    if not isinstance(state, dict) or not state or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        keys = ", ".join(map(str, list(obj)[:_SHOWN])) if isinstance(obj, dict) else type(obj).__name__
        raise PretrainedError(f"{where}: holds no state dict (name -> tensor) at its top level or under 'model' "
                              f"(found: {keys}); save model.state_dict() or {{'model': model.state_dict()}}")
    return state, digest


def _safetensors(where: str, data: bytes) -> dict[str, torch.Tensor]:
    try:
        from safetensors.torch import load
    except ImportError:
        raise PretrainedError(f"{where}: reading .safetensors needs the safetensors package (pip install "
                              "safetensors), or save the weights with torch.save") from None
    try:
        return load(data)
    except Exception as e:
        raise PretrainedError(f"{where}: not a readable .safetensors file ({e})") from None


def resize_pos_embed(posemb: torch.Tensor, tokens_new: int, where: str) -> torch.Tensor:
    """USB's ``resize_pos_embed_vit`` (one class token): (1, 1 + g², d) position embeddings to (1, tokens_new, d),
    the g×g grid resized bicubically (``align_corners=False``) to the new square grid."""
    grid = posemb.shape[1] - 1 if posemb.dim() == 3 and posemb.shape[0] == 1 else -1
    old, new = math.isqrt(max(grid, 0)), math.isqrt(tokens_new - 1)
    if grid < 1 or old * old != grid or new * new != tokens_new - 1:
        raise PretrainedError(f"{where}: tensor 'pos_embed' has shape {list(posemb.shape)}: not a class token and "
                              f"a square grid of position embeddings, as the model's {tokens_new} tokens")
    token, cells = posemb[:, :1], posemb[0, 1:]
    cells = cells.reshape(1, old, old, -1).permute(0, 3, 1, 2)
    cells = F.interpolate(cells, size=(new, new), mode="bicubic", align_corners=False)
    return torch.cat([token, cells.permute(0, 2, 3, 1).reshape(1, new * new, -1)], dim=1)


def usb_state_dict(model: nn.Module, state: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """``state`` under USB's loading rules, for ``model``: a leading ``module`` component stripped, the old
    classifier's keys dropped, ``pos_embed`` resized to the model's (when the model has one)."""
    ours = model.state_dict()
    out = {}
    for key, value in state.items():
        if key.startswith("module"):
            key = ".".join(key.split(".")[1:])
        if key.startswith(DROPPED_PREFIXES):
            continue
        if key == "pos_embed" and "pos_embed" in ours:
            value = resize_pos_embed(value, ours["pos_embed"].shape[1], where)
        out[key] = value
    return out


def _shown(keys: list[str]) -> str:
    more = f", … ({len(keys) - _SHOWN} more)" if len(keys) > _SHOWN else ""
    return ", ".join(keys[:_SHOWN]) + more


def _check_fits(model: nn.Module, state: dict[str, torch.Tensor], where: str, backbone: str) -> None:
    ours = model.state_dict()
    for key, value in state.items():
        if key in ours and value.shape != ours[key].shape:
            raise PretrainedError(f"{where}: tensor {key!r} has shape {list(value.shape)} in the file, "
                                  f"{list(ours[key].shape)} in model.backbone={backbone}: a file of another "
                                  "architecture or size")
    if not set(state) & set(ours):
        raise PretrainedError(f"{where}: none of its {len(state)} tensors ({_shown(sorted(state))}) is one of "
                              f"model.backbone={backbone}'s ({_shown(list(ours))}): a file of another architecture")


def pretrained_errors(backbone: str, path: str | None, sha256: str | None, *, num_classes: int, in_channels: int,
                      image_size: int) -> list[str]:
    """The one-line refusal of a weight file that does not fit the run's backbone (a tensor's shape, another
    architecture, a file that is no state dict), or []: the config's check, before any work (the backbone built on
    the meta device, nothing allocated). [] where no file is here (see :func:`checked_digest`)."""
    if path is None or not os.path.isfile(path):
        return []
    try:
        _fits(backbone, path, sha256, num_classes, in_channels, image_size)
    except PretrainedError as e:
        return [str(e)]
    return []


@lru_cache(maxsize=16)   # a sweep validates each trial's config: one read of the file per fact set
def _fits(backbone: str, path: str, sha256: str | None, num_classes: int, in_channels: int, image_size: int) -> None:
    from mutexmatch.models.registry import build_backbone

    where = f"model.pretrained={path}"
    with torch.device("meta"):
        model = build_backbone(backbone, num_classes=num_classes, in_channels=in_channels, image_size=image_size)
    _check_fits(model, usb_state_dict(model, read_weights(path, sha256)[0], where), where, backbone)


def load_pretrained(model: nn.Module, path: str | Path, sha256: str | None, backbone: str) -> list[str]:
    """Load the weight file at ``path`` into ``model`` (a backbone, named ``backbone`` in messages) by USB's rules;
    returns the report: what was loaded, then the model's tensors left at their initial values and the file's
    tensors with no place in the model, one line each (``missing``/``unexpected``, as ``load_state_dict`` names
    them).

    Raises:
        PretrainedError: see :func:`read_weights`; a tensor whose shape differs from the model's (named, both
            shapes); a file none of whose tensors the model has.
    """
    where = f"model.pretrained={path}"
    raw, digest = read_weights(path, sha256)
    state = usb_state_dict(model, raw, where)
    _check_fits(model, state, where, backbone)
    result = model.load_state_dict(state, strict=False)
    lines = [f"model.pretrained: {len(state) - len(result.unexpected_keys)} tensors loaded into {backbone} from "
             f"{path} (sha256 {digest})"]
    if result.missing_keys:
        lines.append(f"model.pretrained: missing (kept at their initial values): {_shown(result.missing_keys)}")
    if result.unexpected_keys:
        lines.append(f"model.pretrained: unexpected (ignored): {_shown(result.unexpected_keys)}")
    return lines
