"""Starting Ray (orchestration.launch.cluster.init_ray): a local cluster keeps Ray's token authentication without
Ray's WARNING line about it on every launch (issue 34); a cluster joined through $RAY_ADDRESS and a user's own
RAY_AUTH_MODE are left as they are."""

from __future__ import annotations

import pytest


@pytest.fixture
def ray_init(monkeypatch):
    import ray

    calls: list[dict] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return calls


def test_a_local_cluster_asks_for_token_auth_explicitly(ray_init):
    import os

    from orchestration.launch.cluster import init_ray

    assert init_ray() and os.environ["RAY_AUTH_MODE"] == "token" and ray_init[0]["include_dashboard"] is False


def test_a_users_auth_mode_and_a_joined_cluster_are_left_alone(ray_init, monkeypatch):
    import os

    from orchestration.launch.cluster import init_ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    init_ray()
    assert os.environ["RAY_AUTH_MODE"] == "disabled"
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    init_ray()
    assert "RAY_AUTH_MODE" not in os.environ and ray_init[-1]["address"] == "auto"
