"""Every command line answers ``--help``, ``--version`` and a usage error without importing the heavy stack (issue 40
item 5: ``orchestration.sweep|status|train --help`` imported torch, MLflow and pandas, 13-20 s and ~0.9 GB at a load
of 5; ``mutexmatch.train|datasets --help`` imported torch).

The commands are found, not listed: every module of ``mutexmatch``, ``orchestration`` and ``reports`` that runs as
``python -m`` (an ``if __name__ == "__main__":`` block or a ``__main__.py``). One subprocess per command, all started
at once, runs the three answers through :func:`runpy.run_module` (as ``python -m`` does) and reports the exit codes
and which heavy modules ``sys.modules`` holds at the end.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torchvision", "ray", "mlflow", "optuna", "pandas", "matplotlib")
PACKAGES = ("mutexmatch", "orchestration", "reports")

# In the subprocess: each answer as `python -m MODULE ARGS` would give it, then the heavy modules loaded.
PROBE = """
import contextlib, io, json, runpy, sys
module, heavy = sys.argv[1], sys.argv[2].split(",")
codes = {}
for args in (["--help"], ["--version"], ["--no-such-option"]):
    sys.argv = [module, *args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    codes[args[0]] = [code, out.getvalue()[:300], err.getvalue()[-300:]]
print(json.dumps({"codes": codes, "heavy": sorted({m.split(".")[0] for m in sys.modules} & set(heavy))}))
"""


def commands() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if path.name == "__main__.py" or re.search(r'^if __name__ == "__main__":', text, re.M):
                parts = path.relative_to(REPO).with_suffix("").parts
                found.append(".".join(parts[:-1] if parts[-1] == "__main__" else parts))
    return found


def test_the_commands_are_found():
    assert {"mutexmatch.train", "mutexmatch.datasets", "mutexmatch.predict", "mutexmatch.config",
            "mutexmatch.fakedata", "orchestration.sweep", "orchestration.status", "orchestration.train",
            "orchestration.submit", "reports.build"} <= set(commands())


def test_help_version_and_usage_errors_import_nothing_heavy():
    env = {"RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
           "PATH": "/usr/bin:/bin"}
    running = {m: subprocess.Popen([sys.executable, "-c", PROBE, m, ",".join(HEAVY)], cwd=REPO, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for m in commands()}
    problems = []
    for module, proc in running.items():
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            problems.append(f"{module}: the probe failed: {err[-500:]}")
            continue
        result = json.loads(out.strip().splitlines()[-1])
        codes = result["codes"]
        if result["heavy"]:
            problems.append(f"{module}: imports {', '.join(result['heavy'])} for --help/--version/a usage error")
        if codes["--help"][0] != 0 or module not in codes["--help"][1]:
            problems.append(f"{module} --help: exit {codes['--help'][0]}, {codes['--help'][1:]}")
        if codes["--version"][0] != 0 or "mutexmatch" not in codes["--version"][1]:
            problems.append(f"{module} --version: exit {codes['--version'][0]}, {codes['--version'][1:]}")
        bad = codes["--no-such-option"]
        if bad[0] != 2 or "error" not in bad[2] or "Traceback" in bad[2]:
            problems.append(f"{module} --no-such-option: exit {bad[0]}, stderr {bad[2]!r}")
    assert not problems, "\n".join(problems)
