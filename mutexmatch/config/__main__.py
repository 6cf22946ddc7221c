"""``python -m mutexmatch.config``: the default run config as YAML; ``--doc``: the Markdown reference."""

import argparse

import yaml

from mutexmatch.config.doc import config_markdown
from mutexmatch.config.schema import RunConfig

parser = argparse.ArgumentParser(
    prog="python -m mutexmatch.config",
    description="Print the default run config as YAML (a starting point for --config files), or with --doc the "
                "reference of every field (docs/config.md, `make docs`).")
parser.add_argument("--doc", action="store_true", help="print the Markdown reference of every field instead")
if parser.parse_args().doc:
    print(config_markdown())
else:
    print(yaml.safe_dump(RunConfig.model_construct().model_dump(mode="json"), sort_keys=False))
