"""The released NeMo Gym wheel the interop tests judge against: pinned, fetched, checked, unpacked.

The pin is one comment line of ``constraints.txt`` (``# interop-wheel nemo-gym==0.7.0
sha256=...``), so ``.ci/bump-constraints`` keeps it as it keeps every comment line. The wheel is
fetched with ``pip download`` for the interpreter it was released for, refused unless its
sha256 is the pinned one, and kept in a cache folder, so a second run downloads nothing.

Only ``nemo_gym.token_id_capture`` is unpacked, and of it only the modules the record, the
protocols, the file store, the config block, ``run_conformance``, the staging records, digests
and protocols, staging capture and receipt verification are made of, and the staging golden
vectors. The package ``__init__`` files of the release import Gym's server stack; they are
replaced by empty stand-ins. Nothing unpacked ever lands in the checkout: the cache lives in
pytest's cache dir.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CONSTRAINTS",
    "DATA",
    "MODULES",
    "PYTHON_VERSION",
    "STAND_INS",
    "PinnedWheel",
    "WheelUnavailable",
    "fetch_wheel",
    "pinned_wheel",
    "pip_download",
    "sha256_of",
    "unpack",
]

CONSTRAINTS = Path(__file__).resolve().parents[2] / "constraints.txt"
PIN_PREFIX = "# interop-wheel "

PYTHON_VERSION = "3.13.14"
"""The interpreter the release requires; pip picks the wheel as if it ran there."""

PACKAGE = "nemo_gym/token_id_capture"
MODULES = (
    "records.py",
    "protocols.py",
    "store.py",
    "config.py",
    "conformance.py",
    "lineage.py",
    "fingerprint.py",
    "sink.py",
    "staging/records.py",
    "staging/digest.py",
    "staging/protocols.py",
    "staging/capture.py",
    "staging/rebuild.py",
)
"""The modules of ``nemo_gym.token_id_capture`` unpacked: what its record, store, config,
``run_conformance``, capture path (``sink.py``), staging protocols, staging capture (the worker
side that drives a staging sink) and receipt verification import, and nothing else."""

DATA = ("staging/conformance/golden_vectors.json",)
"""Files of ``nemo_gym.token_id_capture`` that are not modules, unpacked to be read: the
digests the staging path publishes for fixed inputs."""

STAND_INS = (
    "nemo_gym/__init__.py",
    f"{PACKAGE}/__init__.py",
    f"{PACKAGE}/staging/__init__.py",
)
"""Package ``__init__`` files written empty: the released ones import Gym's server stack."""

_STAND_IN_TEXT = '"""Empty stand-in: the released package init imports what these tests avoid."""\n'


class WheelUnavailable(RuntimeError):
    """The pinned wheel could not be fetched, or what was fetched is not the pinned wheel."""


@dataclass(frozen=True)
class PinnedWheel:
    """One released wheel, by distribution, version and sha256."""

    distribution: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        """The requirement pip is asked for, ``name==version``."""
        return f"{self.distribution}=={self.version}"

    @property
    def filename(self) -> str:
        """The wheel's file name (a pure-Python wheel, as the release is)."""
        return f"{self.distribution.replace('-', '_')}-{self.version}-py3-none-any.whl"


def pinned_wheel(distribution: str = "nemo-gym", constraints: Path = CONSTRAINTS) -> PinnedWheel:
    """Return the pin of ``distribution`` from the constraints file; raise if there is none."""
    for line in constraints.read_text(encoding="utf-8").splitlines():
        if not line.startswith(PIN_PREFIX):
            continue
        requirement, _, digest = line[len(PIN_PREFIX) :].strip().partition(" sha256=")
        name, _, version = requirement.partition("==")
        if name == distribution:
            return PinnedWheel(name, version, digest.strip())
    raise WheelUnavailable(f"{constraints} pins no interop wheel of {distribution}")


def sha256_of(path: Path) -> str:
    """Return the hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


Download = Callable[[PinnedWheel, Path], None]


def pip_download(pin: PinnedWheel, into: Path) -> None:
    """Download the pinned wheel, alone and binary, into ``into`` with this interpreter's pip."""
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
        "--only-binary=:all:", "--python-version", PYTHON_VERSION,
        pin.requirement, "--dest", str(into),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise WheelUnavailable(
            f"pip download {pin.requirement} exited with {done.returncode}: "
            f"{(done.stdout + done.stderr).strip()[-1500:]}"
        )


@contextmanager
def _exclusive(cache: Path) -> Iterator[None]:
    """Hold the cache's lock: parallel test workers fetch and unpack once, one at a time."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def fetch_wheel(pin: PinnedWheel, cache: Path, download: Download = pip_download) -> Path:
    """Return the pinned wheel in ``cache``, downloading it only when no good copy is there.

    A cached file whose digest is not the pin's is fetched again; a fetched file whose digest
    is not the pin's is refused with :class:`WheelUnavailable` naming both digests.
    """
    with _exclusive(cache):
        target = cache / pin.filename
        if target.exists() and sha256_of(target) == pin.sha256:
            return target
        with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as scratch:
            download(pin, Path(scratch))
            fetched = Path(scratch) / pin.filename
            if not fetched.exists():
                raise WheelUnavailable(
                    f"fetching {pin.requirement} left no {pin.filename}: "
                    f"{sorted(p.name for p in Path(scratch).iterdir())}"
                )
            actual = sha256_of(fetched)
            if actual != pin.sha256:
                raise WheelUnavailable(
                    f"{pin.filename} has sha256 {actual}, but {CONSTRAINTS.name} pins "
                    f"{pin.sha256}; refusing to judge against another build"
                )
            os.replace(fetched, target)
        return target


def unpack(wheel: Path, pin: PinnedWheel, cache: Path) -> Path:
    """Return a folder to put on ``sys.path`` holding the needed modules, the data files and
    the stand-ins.

    Unpacked once per pinned digest; a half-written folder from an interrupted run is redone.
    """
    # The folder names what it holds, so a file added to MODULES or DATA is unpacked anew.
    holds = hashlib.sha256("\n".join(MODULES + DATA).encode()).hexdigest()[:8]
    root = cache / f"unpacked-{pin.version}-{pin.sha256[:16]}-{holds}"
    with _exclusive(cache):
        if (root / ".complete").exists():
            return root
        shutil.rmtree(root, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            for name in MODULES + DATA:
                member = f"{PACKAGE}/{name}"
                destination = root / member
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(archive.read(member))
        for stand_in in STAND_INS:
            (root / stand_in).write_text(_STAND_IN_TEXT, encoding="utf-8")
        (root / ".complete").write_text(pin.sha256, encoding="ascii")
    return root
