"""The PEP 517 build backend of the flextensor Python package (pyproject.toml).

Standard library only: a wheel is a zip of the package's files and three metadata
files, so pip installs ./python with no build requirement and no network. The name and
the version come from pyproject.toml's [project] table, their one source.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = "flextensor"


def _project():
    with open(os.path.join(_HERE, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = text.split("[project]", 1)[1].split("\n[", 1)[0]
    fields = dict(re.findall(r'^(\w[\w-]*)\s*=\s*"([^"]*)"', table, re.M))
    return fields["name"], fields["version"], fields.get("description", ""), fields.get("requires-python", "")


def _metadata():
    name, version, summary, python = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", f"Summary: {summary}"]
    if python:
        lines.append(f"Requires-Python: {python}")
    return "\n".join(lines) + "\n"


def _sources():
    pkg = os.path.join(_HERE, _PACKAGE)
    return sorted(f"{_PACKAGE}/{n}" for n in os.listdir(pkg) if n.endswith(".py"))


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, _, _ = _project()
    dist_info = f"{name}-{version}.dist-info"
    files = []
    for path in _sources():
        with open(os.path.join(_HERE, path), "rb") as f:
            files.append((path, f.read()))
    files.append((f"{dist_info}/METADATA", _metadata().encode()))
    files.append((f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: _flextensor_build\n"
                                        b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    record = "".join(f"{p},{_digest(d)},{len(d)}\n" for p, d in files) + f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode()))
    wheel = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            z.writestr(path, data)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    name, version, _, _ = _project()
    base = f"{name}-{version}"
    sdist = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, sdist), "w:gz") as t:
        for path in ["pyproject.toml", "README.md", "_flextensor_build.py"] + _sources():
            t.add(os.path.join(_HERE, path), arcname=f"{base}/{path}")
        info = _metadata().encode()
        member = tarfile.TarInfo(f"{base}/PKG-INFO")
        member.size = len(info)
        t.addfile(member, io.BytesIO(info))
    return sdist
