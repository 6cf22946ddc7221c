"""What the datasets torchvision reads and downloads share: its published md5s, its errors made precise.

A :class:`TorchvisionDataset` names torchvision's class (``tv_class``: it knows the URLs, files and md5s) and lists
the files it reads (``files``); loading, the dataset command line and fake data (which must get past torchvision's
md5 check, :func:`mutexmatch.data.fake.generated_checksums_accepted`) work from those two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from torchvision.datasets.utils import check_integrity

from mutexmatch.data.imagefiles import regular_file
from mutexmatch.data.registry import BuiltinDataset, DatasetError, DatasetInfo, missing_error


class TorchvisionDataset(BuiltinDataset):
    """A built-in dataset read (and downloaded) through one of torchvision's dataset classes."""

    tv_class: ClassVar[type]

    @property
    def downloadable(self) -> bool:
        return True

    def verify_published_md5s(self, ddir: Path, extra: bool = False, only: Sequence[str] | None = None) -> None:
        """Raise :class:`DatasetError` naming the first present file under ``ddir`` (of ``only``, relative paths,
        when given) whose bytes do not match torchvision's published md5; a missing file is not checked here.

        Nothing read from a data folder is unpickled before this passes (a crafted CIFAR meta file is code); a
        present file that is not a regular file (a pipe would block the md5 read for ever) is refused first."""
        self.check_regular(ddir, extra)
        bad = [(rel, md5) for rel, md5 in self.files(extra) if (only is None or rel in only)
               and md5 is not None and (ddir / rel).is_file() and not check_integrity(str(ddir / rel), md5)]
        if bad:
            more = f" (and {len(bad) - 1} more file(s))" if len(bad) > 1 else ""
            raise DatasetError(f"{self.name}: {ddir / bad[0][0]} does not match its published md5 {bad[0][1]}{more}: "
                               "a corrupted or partial download; delete it and load again with data.download: true")

    def check_regular(self, ddir: Path, extra: bool = False) -> None:
        """Raise :class:`DatasetError` for the first of the dataset's files under ``ddir`` that exists but is not a
        regular file (:func:`mutexmatch.data.imagefiles.regular_file`, the check every file read from a data folder
        passes)."""
        for rel, _ in self.files(extra):
            regular_file(ddir / rel, self.name, DatasetError)

    def open(self, info: DatasetInfo, root: Path, ddir: Path, required: Sequence[str], factory: Callable[[], Any], *,
             download: bool, extra: bool = False) -> Any:
        """Construct the torchvision dataset, turning its generic errors into one precise line.

        torchvision raises ``RuntimeError("Dataset not found or corrupted")`` both for missing files and for files
        that fail the md5 check; we tell the two apart so the user gets either the download hint or the corrupted
        file. A download that cannot reach the network says to fetch the files elsewhere and where to put them.
        """
        self.check_regular(ddir, extra)
        try:
            return factory()
        except RuntimeError as err:
            missing = [ddir / p for p in required if not (ddir / p).is_file()]
            if missing:
                raise missing_error(info, root, ddir, missing) from err
            self.verify_published_md5s(ddir, extra)
            raise DatasetError(f"{info.name}: torchvision rejected the files under {ddir} "
                               f"({' '.join(str(err).split())}): a corrupted or partial download; delete it and load "
                               "again with data.download: true") from None
        except OSError as err:  # URLError, a refused connection, a DNS failure: only a download reaches the network
            if not download:
                raise
            reason = " ".join(str(getattr(err, "reason", None) or err).split())
            layout = sorted({rel.split("/")[0] + ("/" if "/" in rel else "") for rel, _ in self.files(extra)})
            raise DatasetError(f"{info.name}: data.download=true could not fetch the files ({reason}); without "
                               f"network access, download them on a machine that has it (`python -m "
                               f"mutexmatch.datasets download {info.name} --root DIR`) and copy {', '.join(layout)} "
                               f"into {ddir}") from None
