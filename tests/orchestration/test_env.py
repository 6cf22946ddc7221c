"""The environment a sweep sets before Ray is imported (orchestration.runtime.env): Tune reads its warning threshold
at import, so the sweep's face applies it before importing Ray (its first lines) (issue 34: "performance bottleneck" lines on the quickstart's
last screen)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_the_environment_sets_tunes_slow_operation_threshold_by_the_name_tune_reads():
    code = ("from orchestration.runtime.env import apply_closed_network_env\n"
            "apply_closed_network_env()\n"
            "from ray.tune.utils.util import warn_if_slow\n"
            "print(warn_if_slow.DEFAULT_THRESHOLD)\n")
    env = {k: v for k, v in os.environ.items() if k != "TUNE_WARN_THRESHOLD_S"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                         check=True).stdout
    assert out.strip().splitlines()[-1] == "30.0"
