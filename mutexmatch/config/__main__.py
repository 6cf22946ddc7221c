"""``python -m mutexmatch.config``: the default run config as YAML; ``--doc``: the Markdown reference."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from mutexmatch.cli import add_version, entry_point
from mutexmatch.config.doc import config_markdown
from mutexmatch.config.schema import RunConfig
from mutexmatch.plugins import PluginError, load_plugins
from mutexmatch.yamlfile import dump_yaml

parser = argparse.ArgumentParser(
    prog="python -m mutexmatch.config",
    description="Print the default run config as YAML (a starting point for --config files), or with --doc the "
                "reference of every field (docs/config.md, `make docs`).")
parser.add_argument("--doc", action="store_true", help="print the Markdown reference of every field instead")
parser.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_PATH",
                    help="import this plugin first (a module name, a .py file or a package folder; repeatable), so "
                         "the reference lists what it registers; installed entry points are always imported")
add_version(parser)


@entry_point("python -m mutexmatch.config")
def main(argv: Sequence[str] | None = None) -> int:
    args = parser.parse_args(argv)
    try:
        load_plugins(args.plugin, how="--plugin")
    except PluginError as e:
        parser.error(str(e))
    if args.doc:
        print(config_markdown())
    else:
        print(dump_yaml(RunConfig.model_construct().model_dump(mode="json")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
