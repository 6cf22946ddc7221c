"""``python -m mutexmatch.config``: the default run config as YAML; ``--doc``: the Markdown reference."""

import sys

import yaml

from mutexmatch.config.doc import config_markdown
from mutexmatch.config.schema import RunConfig

if "--doc" in sys.argv:
    print(config_markdown())
else:
    print(yaml.safe_dump(RunConfig.model_construct().model_dump(mode="json"), sort_keys=False))
