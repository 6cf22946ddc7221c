"""``missing_data_root``: the one rule for a data folder that is not there (issue 29), read by the config's error line
and, as a fact, by a sweep planned without its data."""

from __future__ import annotations

from mutexmatch.config import DataConfig
from mutexmatch.data.section import data_section_facts, missing_data_root


def test_missing_data_root_names_the_absent_folder_of_a_dataset_that_needs_files(tmp_path):
    absent = str(tmp_path / "nothing")
    d = DataConfig(dataset="cifar10", num_labels=40, root=absent)
    assert missing_data_root(d) == d.root
    assert any(repr(d.root) in line for line in data_section_facts(d)[2])
    assert missing_data_root(d.model_copy(update={"download": True})) is None
    assert missing_data_root(d.model_copy(update={"root": str(tmp_path)})) is None
    assert missing_data_root(DataConfig(dataset="digits", root=absent)) is None  # ships inside scikit-learn
