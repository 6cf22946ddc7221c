"""The run config's ``optim`` section: SGD with the FixMatch cosine schedule, or USB's AdamW fine-tuning recipe
(issue 42 item 3; :mod:`mutexmatch.training.optim` builds them), and its checks against the rest of the config."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from mutexmatch.checks import at_least, within

_UnitOpen = Annotated[float, AfterValidator(within(0.0, 1.0, high_open=True))]   # [0, 1)


class OptimConfig(BaseModel):
    """SGD with Nesterov momentum and the FixMatch cosine schedule, or USB's AdamW fine-tuning recipe."""

    # The schema's sections' settings (schema._Section): YAML's "0.5" stays a string, unknown keys are refused.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True, frozen=False)

    # Left out of the config (and so of its hash) at their defaults, the optimiser every earlier run used.
    name: Literal["sgd", "adamw"] = Field(
        "sgd", exclude_if=lambda v: v == "sgd", description="`sgd` (the paper's); `adamw`: USB's fine-tuning "
        "optimiser (torch's AdamW, default betas and eps) over USB's parameter groups: no weight decay for 1-D "
        "parameters, biases, a ViT's pos_embed and cls_token; layer-wise decay by optim.layer_decay.")
    layer_decay: Annotated[float, AfterValidator(within(0.0, 1.0, low_open=True))] = Field(
        1.0, exclude_if=lambda v: v == 1.0, description="adamw only: layer-wise learning-rate decay d (USB's "
        "layer_decay): layer i of L (a ViT: stem 0, block N at N + 1, its final norm with the last block, the "
        "heads last) trains at lr·d^(L-1-i); 1 = every layer at lr. Needs a backbone that declares its layers "
        "(the ViTs).")
    warmup: Annotated[int, AfterValidator(at_least(0))] = Field(
        0, exclude_if=lambda v: v == 0, description="[W] linear warm-up steps (USB's num_warmup_iter): the LR "
        "factor is t/W for t < W, then the schedule runs over the remaining T - W steps (USB's "
        "get_cosine_schedule_with_warmup); 0 = none.")
    lr: Annotated[float, AfterValidator(within(0.0, 10.0, low_open=True))] = Field(
        0.03, description="Base learning rate.")
    momentum: _UnitOpen = Field(0.9, description="SGD momentum (sgd only).")
    nesterov: bool = Field(True, description="Nesterov momentum (sgd only).")
    weight_decay: _UnitOpen = Field(5e-4, description="Weight decay: coupled for sgd, where BatchNorm parameters "
                                    "get none; decoupled for adamw, on USB's parameter groups.")
    schedule: Literal["cosine", "constant"] = Field(
        "cosine", description="`cosine`: LR factor cos(c·π·t/T) per step (T = train.iterations); `constant`: none.")
    cosine_factor: Annotated[float, AfterValidator(within(0.0, 0.5))] = Field(
        7 / 16, description="[c] in cos(c·π·t/T); FixMatch and MutexMatch use 7/16.")


def check_optim(optim: OptimConfig, iterations: int) -> list[str]:
    """The section's checks across its fields and the run (``train.iterations``), one line each."""
    errors = []
    if optim.layer_decay != 1.0 and optim.name != "adamw":
        errors.append(f"optim.layer_decay={optim.layer_decay:g}: applies to optim.name adamw only (USB's "
                      f"fine-tuning recipe); with {optim.name} leave it at 1")
    # optim.warmup may exceed train.iterations (the rate then ramps the whole run, as USB's schedule does): a sweep's
    # smoke run shortens the iterations and keeps the warm-up
    return errors
