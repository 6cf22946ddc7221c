"""The project's one YAML loader reads numbers as people write them (issue 40 item 4): YAML 1.2's float rule
(``3e-4`` is a float, where PyYAML's YAML 1.1 reads a string), and YAML 1.1's surprises (``0755`` is 493, ``1:00``
is 60) refused in one line, the same in a file as in ``--set`` (finding #20)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from mutexmatch.yamlfile import YamlFileError, dump_yaml, load_text, read_set_value, read_yaml_mapping

FLOATS = {
    "3e-4": 3e-4, "1E-5": 1e-5, "5.e-4": 5e-4, ".5": 0.5, "-.5": -0.5, "+.5": 0.5, "-3e-4": -3e-4, "+1E5": 1e5,
    "1e3": 1000.0, "2.5": 2.5, "-2.": -2.0, "1.5e+3": 1500.0, "6.02E23": 6.02e23, "0.": 0.0, "1_000.5": 1000.5,
}
INTS = {"0": 0, "7": 7, "-3": -3, "+4": 4, "1_000": 1000, "0x1F": 31, "0b101": 5, "10": 10}
STRINGS = ["e5", "1e", "1e-", ".", "-.", "1.2.3", "0o17", "3e-4x", "1,5", "0.6C", "1e-4.5", "abc", "09"]


@pytest.mark.parametrize("text, value", FLOATS.items())
def test_floats_as_people_write_them_in_a_file_and_in_set(tmp_path, text, value):
    path = tmp_path / "run.yaml"
    path.write_text(f"optim: {{lr: {text}}}\nlist: [{text}]\n")
    read = read_yaml_mapping(path)
    assert read == {"optim": {"lr": value}, "list": [value]} and type(read["optim"]["lr"]) is float
    assert type(read_set_value(f"optim.lr={text}", text)) is float and read_set_value("optim.lr", text) == value


@pytest.mark.parametrize("text, value", INTS.items())
def test_integers_stay_integers(text, value):
    read = load_text(f"seed: {text}", "x")["seed"]
    assert read == value and type(read) is int


@pytest.mark.parametrize("text", STRINGS)
def test_what_is_not_a_number_stays_text(text):
    assert load_text(f"k: {text}", "x") == {"k": text}


def test_special_floats_and_quoted_numbers():
    read = load_text("a: .inf\nb: -.Inf\nc: .nan\nd: '3e-4'\ne: \"1E-5\"\n", "x")
    assert read["a"] == math.inf and read["b"] == -math.inf and math.isnan(read["c"])
    assert read["d"] == "3e-4" and read["e"] == "1E-5"


@pytest.mark.parametrize("text, was", [("0755", "493"), ("010", "8"), ("-017", "-15"), ("1:00", "60"),
                                       ("1:30.5", "90.5")])
def test_yaml11_octal_and_base60_are_refused_in_a_file_as_in_set(tmp_path, text, was):
    path = tmp_path / "run.yaml"
    path.write_text(f"train:\n  seed: {text}\n")
    with pytest.raises(YamlFileError) as file_error:
        read_yaml_mapping(path, "run config")
    message = str(file_error.value)
    assert message == (f"run config {str(path)!r}: line 2, column 9: YAML 1.1 reads {text} as {was}; write the "
                       f"number you mean (or quote it, '{text}', for text)"), message
    with pytest.raises(YamlFileError) as set_error:
        read_set_value("train.seed=" + text, text)
    assert str(set_error.value) == (f"--set 'train.seed={text}': YAML 1.1 reads {text} as {was}; write the number "
                                    f"you mean (or quote it, '{text}', for text)")
    assert load_text(f"seed: '{text}'", "x") == {"seed": text}  # quoted: text, as the message says


def test_what_the_project_writes_reads_back_unchanged():
    """A string the loader would read as a number is quoted (yaml.safe_dump leaves `1e5` bare: a run folder named
    so would come back as 100000.0 from the run's config.yaml)."""
    data = {"output_dir": "1e5", "name": ".5", "seed": "0755", "lr": 3e-4, "wd": 1e-5, "k": "0.6C", "n": [1, 2.5, "2."],
            "inf": math.inf}
    assert load_text(dump_yaml(data), "x") == data


def test_every_yaml_the_project_reads_or_writes_goes_through_the_one_loader():
    """A YAML parsed or written with PyYAML's own functions would read `3e-4` as text again, or write `1e5` bare."""
    repo = Path(__file__).resolve().parents[2]
    direct = re.compile(r"\byaml\.(safe_load|load|full_load|unsafe_load|safe_dump|dump)(_all)?\(")
    found = [f"{path.relative_to(repo)}:{n}" for folder in ("mutexmatch", "orchestration", "reports", "experiments",
                                                           "benchmarks")
             for path in sorted((repo / folder).rglob("*.py")) if path.name != "yamlfile.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if direct.search(line)]
    assert not found, f"use mutexmatch.yamlfile (read_yaml, load_text, dump_yaml) at {found}"
