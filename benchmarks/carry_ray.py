"""A Ray wheel small enough to carry to a lent GPU machine, whose image has no Ray (``device_check.sh spanning``).

    python benchmarks/carry_ray.py RAY_WHEEL [--into .whl]

A device call carries at most 64 MiB, and Ray 2.60's wheel is 79 MB (cp311, manylinux2014); 31 MB of it are the
Java jars (``ray/jars/``: Java and cross-language workers only), which this copy leaves out, with their lines of
the wheel's RECORD, so ``pip install --no-index --no-deps --target`` (what ``device_check.sh`` does with ``.whl/``)
installs the rest. Get the wheel of the machine's Python (3.12 there) here first, e.g.
``pip download ray==2.60.0 --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64
-d /tmp/w``, with what Ray needs and the image lacks (jsonschema, jsonschema-specifications, referencing, rpds-py).
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

LEFT_OUT = "ray/jars/"


def strip_wheel(wheel: Path, into: Path) -> Path:
    """``wheel`` without :data:`LEFT_OUT`'s files, written under ``into`` by the same name; returns its path."""
    out = into / wheel.name
    if out.resolve() == wheel.resolve():
        raise SystemExit(f"{wheel}: --into must be another folder than the wheel's")
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename.startswith(LEFT_OUT):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(keepends=True)
                                if not line.startswith(LEFT_OUT.encode()))
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("wheel", type=Path, help="a ray-*.whl")
    p.add_argument("--into", type=Path, default=Path(".whl"), help="folder of the carried wheels (default .whl)")
    args = p.parse_args(argv)
    if not args.wheel.is_file() or not args.wheel.name.startswith("ray-") or args.wheel.suffix != ".whl":
        p.error(f"{args.wheel}: not a Ray wheel file (ray-<version>-<tags>.whl)")
    out = strip_wheel(args.wheel, args.into)
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB (was {args.wheel.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
