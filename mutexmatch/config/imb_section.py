"""The run config's ``imb_algorithm`` section (issue 41 item 3): an imbalance algorithm composed with the base
``algorithm`` as USB composes them, ``{name: <imbalance algorithm>, <its parameters>}``; the registry is
:mod:`mutexmatch.imb_algorithms` (imported lazily: it loads torch)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ImbAlgorithmConfig(BaseModel):
    """An imbalance algorithm composed with the base `algorithm` as USB composes them (docs/longtail.md).

    Its name and its own parameters (the table below), resolved to their defaults once validated; the section joins
    the config hash, and the base must be one the imbalance algorithm allows (checked before any work)."""

    # The schema's sections' settings (strict, unknown fields refused by the chosen algorithm's model), with the
    # chosen imbalance algorithm's parameters as the extra keys, as the algorithm section holds its algorithm's.
    model_config = ConfigDict(extra="allow", strict=True, validate_assignment=True)

    name: str = Field(description="Registered imbalance algorithm (`mutexmatch.imb_algorithms.IMB_ALGORITHMS`, the "
                      "table below); the other keys of this section are its parameters.")

    @model_validator(mode="before")
    @classmethod
    def _named(cls, v: Any) -> Any:
        if isinstance(v, dict) and "name" not in v:
            from mutexmatch.imb_algorithms import IMB_ALGORITHMS

            raise ValueError("imb_algorithm.name: missing; the section is {name: <imbalance algorithm>, <its "
                             f"parameters>}}, name one of {', '.join(sorted(IMB_ALGORITHMS))}")
        return v

    @model_validator(mode="after")
    def _own_parameters(self) -> "ImbAlgorithmConfig":
        from mutexmatch.checks import shown
        from mutexmatch.imb_algorithms import IMB_ALGORITHMS

        if self.name not in IMB_ALGORITHMS:
            raise ValueError(f"imb_algorithm.name={shown(self.name)}: unknown; registered: "
                             f"{', '.join(sorted(IMB_ALGORITHMS))}")
        params = IMB_ALGORITHMS[self.name].imb_params_model.parse(dict(self.__pydantic_extra__ or {}), self.name)
        self.__pydantic_extra__.clear()
        self.__pydantic_extra__.update(params.model_dump())
        return self


def imb_base_errors(section: Any, base: str) -> list[str]:
    """One line where the chosen imbalance algorithm does not compose with ``algorithm.name`` ``base`` (checked
    before any work)."""
    if section is None:
        return []
    from mutexmatch.imb_algorithms import base_errors

    return base_errors(section.name, base)
