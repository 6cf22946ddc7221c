"""The tracking-URI rule's refusals and its credentials (issue 33 items 1 and 7)."""

from __future__ import annotations

import pytest

from orchestration.contract.tracking_uri import resolve_tracking_uri


def test_a_password_in_the_uri_goes_to_mlflows_variables_and_nowhere_else(monkeypatch) -> None:
    # http-creds-real: the password was stored in the parent run's mutexmatch.command tag, the UI link and the
    # resume command; every one of them is built from the resolved URI
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    uri = resolve_tracking_uri("http://alice:S3cret%40PW@127.0.0.1:47510/path", "/tmp")
    assert uri == "http://127.0.0.1:47510/path"
    import os

    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "alice" and os.environ["MLFLOW_TRACKING_PASSWORD"] == "S3cret@PW"
    assert resolve_tracking_uri("https://127.0.0.1:5000", "/tmp") == "https://127.0.0.1:5000"


@pytest.mark.parametrize("uri, said", [
    ("ftp://127.0.0.1/x", "ftp:// is not a store MLflow reads"),
    ("sqlite://", "an in-memory store is gone when the command ends"),
    ("mysql://u@127.0.0.1:1/x", "the mysql driver 'MySQLdb' is not installed here"),
    ("postgresql+nosuchdriver://h/x", "the postgresql driver 'nosuchdriver' is not installed here"),
])
def test_a_uri_no_store_opens_from_is_one_line(uri, said) -> None:
    with pytest.raises(ValueError) as refused:
        resolve_tracking_uri(uri, "/tmp")
    assert str(refused.value).startswith(f"--tracking-uri={uri!r}: {said}"), refused.value
