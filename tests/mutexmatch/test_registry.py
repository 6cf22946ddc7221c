"""mutexmatch.registry: the one rule both config-named class registries (algorithms, imbalance algorithms) follow."""
from __future__ import annotations

import pytest

from mutexmatch.registry import register_class


class Params:
    pass


def _register(registry: dict, name: str, cls: type, errors: list[str] | None = None) -> type:
    return register_class(registry, name, cls, field="thing.name", name_attr="thing_name", params_attr="P",
                          params_base=Params, params_rule="a Params model",
                          declaration_errors=lambda c: list(errors or []))


def test_a_class_is_registered_and_named_once() -> None:
    registry: dict[str, type] = {}
    a = type("A", (), {"P": Params})
    assert _register(registry, "a", a) is a and registry == {"a": a} and a.thing_name == "a"
    with pytest.raises(ValueError, match=r"^thing\.name='a': already registered by A$"):
        _register(registry, "a", type("B", (), {"P": Params}))
    assert registry == {"a": a}


@pytest.mark.parametrize("params", [None, dict, {"x": 1}])
def test_a_class_without_its_parameter_model_is_refused(params) -> None:
    registry: dict[str, type] = {}
    with pytest.raises(ValueError, match=r"^B\.P: must be a Params model$"):
        _register(registry, "b", type("B", (), {"P": params}))
    assert registry == {}


def test_every_declaration_problem_is_one_line_and_nothing_is_registered() -> None:
    registry: dict[str, type] = {}
    c = type("C", (), {"P": Params})
    with pytest.raises(ValueError) as err:
        _register(registry, "c", c, ["C.terms: 'X' is not a term name", "C.bases: 'y' is not a registered algorithm"])
    assert str(err.value).splitlines() == ["C.terms: 'X' is not a term name",
                                           "C.bases: 'y' is not a registered algorithm"]
    assert registry == {} and not hasattr(c, "thing_name")
