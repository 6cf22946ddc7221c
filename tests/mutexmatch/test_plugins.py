"""Plugins (issue 44 item 1): an algorithm, a dataset and a backbone in a folder outside the project join the
registries through a config's ``plugins:`` (a path relative to the YAML, or a module name) or an installed entry
point; the plugin's source digest joins the config hash of the runs that use its names (built-in configs keep
theirs); a plugin that cannot be used is one line naming its file. The plugin is the worked example of
docs/plugins.md (docs/plugin_example/my_methods), copied to ``tmp_path``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from mutexmatch import plugins
from mutexmatch.config import ConfigError, config_hash, load_config, parse_config

RUN = {"data": {"dataset": "mydigits", "num_labels": 20}, "model": {"backbone": "tiny_cnn"},
       "algorithm": {"name": "myfixmatch"}, "train": {"iterations": 4, "eval_interval": 2}}
BUILTIN = {"data": {"dataset": "digits", "num_labels": 20}, "model": {"backbone": "small_cnn"},
           "algorithm": {"name": "fixmatch"}, "train": {"iterations": 4, "eval_interval": 2}}


def _research(tmp_path: Path, example: Path) -> Path:
    """A user's own repository: the plugin package and a config folder beside it."""
    home = tmp_path / "research"
    shutil.copytree(example / "my_methods", home / "my_methods", ignore=shutil.ignore_patterns("__pycache__"))
    (home / "configs").mkdir()
    return home


def _yaml(path: Path, raw: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_plugin_folder_outside_the_project_joins_every_registry(tmp_path, plugin_sandbox):
    from mutexmatch.algorithms import ALGORITHMS, algorithms_markdown
    from mutexmatch.data.builtin import DATASETS
    from mutexmatch.models import BACKBONES, backbones_markdown

    example, _ = plugin_sandbox
    home = _research(tmp_path, example)
    cfg = load_config(_yaml(home / "configs" / "run.yaml", {**RUN, "plugins": ["../my_methods"]}))
    assert cfg.plugins == [str(home / "my_methods")]   # relative to the YAML, not to the current folder
    assert {"myfixmatch"} <= ALGORITHMS.keys() and "mydigits" in DATASETS and "tiny_cnn" in BACKBONES
    [plugin] = plugins.loaded_plugins()
    assert (plugin.module, plugin.source) == ("my_methods", home / "my_methods")
    assert sorted(plugin.names) == [("algorithm", "myfixmatch"), ("backbone", "tiny_cnn"), ("dataset", "mydigits")]
    assert plugin.digest == plugins.source_digest(home / "my_methods")
    assert plugins.config_plugin_digests(cfg.to_dict()) == {"my_methods": plugin.digest}
    # the generated reference (python -m mutexmatch.config --doc) lists what the plugin registered
    assert any("`myfixmatch`" in line for line in algorithms_markdown())
    assert any("`tiny_cnn`" in line for line in backbones_markdown())


def test_a_module_name_is_imported_from_the_import_path(tmp_path, plugin_sandbox, monkeypatch):
    example, _ = plugin_sandbox
    home = _research(tmp_path, example)
    monkeypatch.syspath_prepend(str(home))
    cfg = parse_config({**RUN, "plugins": ["my_methods"]})
    assert cfg.plugins == ["my_methods"] and plugins.provider("algorithm", "myfixmatch").source == home / "my_methods"


def test_the_plugin_code_joins_the_config_hash_and_builtin_hashes_stay(tmp_path, plugin_sandbox):
    example, forget = plugin_sandbox
    home = _research(tmp_path, example)
    entry = [str(home / "my_methods")]
    before = config_hash(parse_config({**RUN, "plugins": entry}))
    builtin = config_hash(parse_config({**BUILTIN, "plugins": entry}))
    assert builtin == config_hash(parse_config(BUILTIN))   # a plugin listed but not used changes no hash
    assert config_hash(parse_config({**RUN, "plugins": entry, "output_dir": str(tmp_path / "elsewhere")})) == before

    with (home / "my_methods" / "methods.py").open("a") as f:
        f.write("\n# a changed line of the method\n")
    forget()   # a new launch, after the change
    after = config_hash(parse_config({**RUN, "plugins": entry}))
    assert after != before
    assert config_hash(parse_config({**BUILTIN, "plugins": entry})) == builtin


def _bad(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, text, said", [
    ("broken.py", "def method(:\n    pass\n", "cannot import: SyntaxError: invalid syntax (line 1)"),
    ("raises.py", "import os\nraise RuntimeError('needs a GPU driver')\n",
     "cannot import: RuntimeError: needs a GPU driver (raises.py, line 2)"),
    ("twice.py", "from mutexmatch.algorithms import FixMatch, register_algorithm\n\n\n"
                 "@register_algorithm('fixmatch')\nclass Mine(FixMatch):\n    pass\n",
     "algorithm.name='fixmatch': already registered by FixMatch (twice.py, line 4)"),
    ("missing_dep.py", "import package_that_is_not_installed\n",
     "ModuleNotFoundError: No module named 'package_that_is_not_installed' (missing_dep.py, line 1)"),
])
def test_a_plugin_that_cannot_be_used_is_one_line_naming_its_file(tmp_path, plugin_sandbox, name, text, said):
    path = _bad(tmp_path, name, text)
    with pytest.raises(ConfigError) as e:
        parse_config({**BUILTIN, "plugins": [str(path)]})
    assert str(e.value).splitlines() == [str(e.value)], str(e.value)
    assert str(e.value).startswith(f"plugins: {str(path)!r}: ") and said in str(e.value), str(e.value)
    assert name.removesuffix(".py") not in sys.modules


def test_a_plugin_fixed_after_a_failed_import_loads_and_a_taken_module_name_is_refused(tmp_path, plugin_sandbox):
    from mutexmatch.algorithms import ALGORITHMS

    path = _bad(tmp_path, "half.py", "from mutexmatch.algorithms import FixMatch, register_algorithm\n\n\n"
                                     "@register_algorithm('half')\nclass Half(FixMatch):\n    pass\n\n\nraise "
                                     "ImportError('a missing piece')\n")
    with pytest.raises(ConfigError, match=r"ImportError: a missing piece \(half.py, line 9\)"):
        parse_config({**BUILTIN, "plugins": [str(path)]})
    assert "half" not in ALGORITHMS and "half" not in sys.modules   # nothing of the failed import stays
    path.write_text(path.read_text().replace("raise ImportError('a missing piece')", ""))
    parse_config({**BUILTIN, "algorithm": {"name": "half"}, "plugins": [str(path)]})
    with pytest.raises(ConfigError, match=r"its module name 'yaml' is taken by the module imported from .*; rename "):
        parse_config({**BUILTIN, "plugins": [str(_bad(tmp_path, "yaml.py", "x = 1\n"))]})


@pytest.mark.parametrize("entry, said", [
    ("./no_such_folder", "no such file or folder (a path in a YAML is relative to the YAML's folder)"),
    ("no_such_module", "no module named 'no_such_module' here"),
])
def test_a_plugin_that_is_not_there_is_one_line(tmp_path, plugin_sandbox, entry, said):
    with pytest.raises(ConfigError) as e:
        load_config(_yaml(tmp_path / "run.yaml", {**BUILTIN, "plugins": [entry]}))
    assert len(str(e.value).splitlines()) == 1 and said in str(e.value), str(e.value)


@pytest.mark.parametrize("value", ["./my_methods", [["./a"], 2], [""], {"zz": 1}])
def test_a_plugins_value_that_is_not_a_list_of_names_is_one_line(plugin_sandbox, value):
    with pytest.raises(ConfigError) as e:
        parse_config({**BUILTIN, "plugins": value})
    assert str(e.value) == f"plugins={value!r}: must be a list of plugins: module names, or paths of .py files and " \
                           "package folders (e.g. [./my_methods])"


def test_two_plugins_of_one_name_with_other_code_are_refused(tmp_path, plugin_sandbox):
    example, _ = plugin_sandbox
    first, second = _research(tmp_path / "a", example), _research(tmp_path / "b", example)
    (second / "my_methods" / "nets.py").write_text((second / "my_methods" / "nets.py").read_text() + "\n# other\n")
    parse_config({**RUN, "plugins": [str(first / "my_methods")]})
    parse_config({**RUN, "plugins": [str(first / "my_methods")]})   # the same one again: loaded once
    with pytest.raises(ConfigError, match=r"a plugin module named 'my_methods' is already loaded from .*/a/"):
        parse_config({**RUN, "plugins": [str(second / "my_methods")]})


def _installed(site: Path, example: Path) -> Path:
    """``my_methods`` installed in ``site`` with an entry point, as pip leaves a wheel's files."""
    shutil.copytree(example / "my_methods", site / "my_methods", ignore=shutil.ignore_patterns("__pycache__"))
    info = site / "my_methods-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-methods\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINT_GROUP}]\nmy_methods = my_methods\n")
    return site


def test_an_installed_entry_point_works_without_plugins(tmp_path, plugin_sandbox, monkeypatch):
    example, _ = plugin_sandbox
    site = _installed(tmp_path / "site", example)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(plugins, "_ENTRY_POINTS_LOADED", False)
    cfg = parse_config(RUN)
    assert cfg.plugins == []
    found = plugins.provider("algorithm", "myfixmatch")
    assert found.entry == "my_methods" and found.source == site / "my_methods"
    assert plugins.config_plugin_digests(cfg.to_dict()) == {"my_methods": plugins.source_digest(site / "my_methods")}


def test_a_worker_that_never_saw_the_files_imports_the_shipped_copy(tmp_path, plugin_sandbox, monkeypatch):
    """A trial on a cluster: its config names the driver's path, which is not there; Ray's py_modules put a copy on
    the import path and PLUGINS_ENV names the module. The copy's digest is the driver's."""
    example, _ = plugin_sandbox
    shipped = _research(tmp_path / "ray_py_modules", example)
    monkeypatch.syspath_prepend(str(shipped))
    monkeypatch.setenv(plugins.PLUGINS_ENV, "my_methods")
    driver_path = tmp_path / "driver_only" / "my_methods"
    cfg = parse_config({**RUN, "plugins": [str(driver_path)]})
    assert plugins.config_plugin_digests(cfg.to_dict()) == {"my_methods": plugins.source_digest(example / "my_methods")}


def test_the_config_command_lists_a_plugins_names(tmp_path, plugin_sandbox, capsys):
    from mutexmatch.config.__main__ import main

    example, _ = plugin_sandbox
    home = _research(tmp_path, example)
    assert main(["--doc", "--plugin", str(home / "my_methods")]) == 0
    out = capsys.readouterr().out
    assert "| `myfixmatch` | MyFixMatch: FixMatch" in out and "| `tiny_cnn` |" in out
