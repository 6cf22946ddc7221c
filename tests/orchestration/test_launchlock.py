"""One launch at a time per store, whatever the YAML (issue 33 item 3)."""

from __future__ import annotations

import pytest

from orchestration.launch.launchlock import LaunchRunning, StoreNotWritable, launch_lock, lock_path


def test_two_experiments_of_one_store_share_one_lock_and_the_second_is_refused(tmp_path) -> None:
    # race-fresh-two-sweeps: two YAMLs started together on a fresh store; the second died in MLflow's schema creation
    uri = f"sqlite:///{tmp_path / 'race.db'}"
    assert lock_path(uri, "reuseA") == lock_path(uri, "reuseB") == tmp_path / ".race.db.launch.lock"
    with launch_lock(uri, "reuseA", "python -m orchestration.sweep reuseA.yaml") as name:
        name("20261127-170000-abcd")
        with pytest.raises(LaunchRunning, match=r"experiment 'reuseB' in sqlite:///.*race\.db: another launch is "
                                                r"running \(launch 20261127-170000-abcd, driver pid \d+ .*reuseA\.yaml"
                                                r"\); one launch at a time per store, whatever its YAML"):
            with launch_lock(uri, "reuseB", "python -m orchestration.sweep reuseB.yaml"):
                pass
    with launch_lock(uri, "reuseB", "python -m orchestration.sweep reuseB.yaml"):  # free again once A ended
        pass


def test_lock_names_cannot_collide_across_stores_or_names(tmp_path) -> None:
    # lock-name-collision: `adv+1` and `adv_1` mapped to one file; now the experiment is not in the name at all,
    # and two stores of one folder keep two locks
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    assert lock_path(a, "adv+1") == lock_path(a, "adv_1") != lock_path(b, "adv+1")
    with launch_lock(a, "adv+1", "x"), launch_lock(b, "adv_1", "y"):
        pass


def test_a_store_whose_folder_cannot_hold_the_lock_is_refused_in_one_line() -> None:
    # lock-ro-*: the lock was skipped silently and MLflow failed later with 81 lines; /proc stands in for a
    # read-only mount (root writes through chmod)
    uri = "sqlite:////proc/mutexmatch-no-such/lock.db"
    with pytest.raises(StoreNotWritable, match=r"^--tracking-uri sqlite:////proc/mutexmatch-no-such/lock\.db: "
                                               r"cannot write in its folder /proc/mutexmatch-no-such \(.*\); a sweep "
                                               r"writes to its store"):
        with launch_lock(uri, "e", "x"):
            pass


def test_a_tracking_server_has_no_lock_file() -> None:
    assert lock_path("http://127.0.0.1:5000", "e") is None
    with launch_lock("http://127.0.0.1:5000", "e", "x") as name:
        name("launch")


def test_the_lock_follows_a_symlinked_store_to_the_file_it_names(tmp_path) -> None:
    # finding #18: a store reached through a link kept its lock beside the link, so two launches ran on one store
    real = tmp_path / "real" / "mlflow.db"
    real.parent.mkdir()
    real.touch()
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "elsewhere" / "link.db"
    link.symlink_to(real)
    direct, linked = f"sqlite:///{real}", f"sqlite:///{link}"
    assert lock_path(linked) == lock_path(direct) == real.parent / ".mlflow.db.launch.lock"
    with launch_lock(direct, "a", "python -m orchestration.sweep a.yaml"):
        with pytest.raises(LaunchRunning, match="another launch is running"):
            with launch_lock(linked, "b", "python -m orchestration.sweep b.yaml"):
                pass
