"""mutexmatch.training's public surface: every exported name resolves to the object of the module that holds it,
and the light readers (orchestration's status and tracking read the callbacks' events, the run folder and
format_duration) import neither torch nor the trainer."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import mutexmatch.training as training


@pytest.mark.parametrize("name", training.__all__)
def test_every_public_name_is_its_modules_object(name: str) -> None:
    module = importlib.import_module(f"mutexmatch.training.{training._EXPORTS[name]}")
    assert getattr(training, name) is getattr(module, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Trainr'"):
        training.Trainr  # noqa: B018


def test_the_light_readers_import_neither_torch_nor_the_loop() -> None:
    code = ("import sys\n"
            "from mutexmatch.training import EvalEvent, RunFolder, RunSummary, StartEvent, StepCost, checkpoint_pair\n"
            "from mutexmatch.training import format_duration\n"
            "heavy = sorted(m for m in sys.modules if m == 'torch' or m == 'mutexmatch.training.loop')\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_command_line_face_is_the_command_modules_main() -> None:
    import mutexmatch.train as face
    from mutexmatch.training.command import main

    # the face wraps the command's main in the one command-line error handler (mutexmatch.cli) and adds nothing
    assert face.main.__wrapped__ is main and training.main is main
