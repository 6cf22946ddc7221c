"""The rule a class named by a config section joins its registry by (``@register_algorithm``,
``@register_imb_algorithm``): a name is taken once, the class declares its parameter model, and every other problem
of its declaration is refused, one line each, before anything is registered."""
from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import TypeVar

C = TypeVar("C", bound=type)


def register_class(registry: MutableMapping[str, type], name: str, cls: C, *, field: str, name_attr: str,
                   params_attr: str, params_base: type, params_rule: str,
                   declaration_errors: Callable[[C], list[str]]) -> C:
    """Register ``cls`` as ``registry[name]`` and set ``cls.<name_attr>`` to ``name``; ``ValueError`` where ``field``
    (the config value, e.g. ``algorithm.name``) ``name`` is taken, where ``cls.<params_attr>`` is not a subclass of
    ``params_base`` (said as "must be ``params_rule``"), or with the lines ``declaration_errors(cls)`` gives."""
    if name in registry:
        raise ValueError(f"{field}={name!r}: already registered by {registry[name].__qualname__}")
    model = getattr(cls, params_attr)
    if not (isinstance(model, type) and issubclass(model, params_base)):
        raise ValueError(f"{cls.__qualname__}.{params_attr}: must be {params_rule}")
    errors = declaration_errors(cls)
    if errors:
        raise ValueError("\n".join(errors))
    setattr(cls, name_attr, name)
    registry[name] = cls
    return cls
