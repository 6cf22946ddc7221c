"""Which Optuna study a store uses (issue 33 item 5): the rule alone, over every case it distinguishes."""

from __future__ import annotations

from types import SimpleNamespace

from orchestration import contract as C


def _lookup(studies: dict[str, object]):
    return lambda name: studies.get(name, C.ABSENT)


def test_a_store_never_continues_another_stores_study():
    me = C.store_identity(SimpleNamespace(experiment_id="1", creation_time=1700000000123))
    assert me == "1@1700000000123"
    own = f"s:k:h@{me}"
    assert C.choose_study("s:k:h", me, _lookup({}), ran_here=False) == ("s:k:h", True)  # new: claimed
    assert C.choose_study("s:k:h", me, _lookup({"s:k:h": me}), ran_here=True) == ("s:k:h", False)
    assert C.choose_study("s:k:h", me, _lookup({"s:k:h": "1@5"}), ran_here=True) == (own, True)  # another store's
    assert C.choose_study("s:k:h", me, _lookup({"s:k:h": "1@5", own: me}), ran_here=True) == (own, False)
    # a study from before the mark: the store that ran it keeps it; a fresh store beside it gets its own
    assert C.choose_study("s:k:h", me, _lookup({"s:k:h": None}), ran_here=True) == ("s:k:h", True)
    assert C.choose_study("s:k:h", me, _lookup({"s:k:h": None}), ran_here=False) == (own, True)
