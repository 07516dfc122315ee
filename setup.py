"""Package discovery for the folder layout; everything else is in pyproject.toml.

The import names differ from the folders (``brain.server`` lives in ``server/``), which
``[tool.setuptools.packages.find]`` cannot express: it names packages after their folders.
So every package below each folder of ``[tool.setuptools.package-dir]`` is found here, and
a new sub-package ships without anyone adding it to a list.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def discover(package_dir: dict[str, str]) -> list[str]:
    """Every package under each mapped folder, named by its import name; a folder that is
    itself mapped (``clients/v1`` is ``brain.v1``) is left to its own mapping."""
    folders = {name: Path(folder) for name, folder in package_dir.items()}
    packages = []
    for name, folder in folders.items():
        nested = [
            ".".join(other.relative_to(folder).parts)
            for other in folders.values()
            if other != folder and other.is_relative_to(folder)
        ]
        exclude = [pattern for sub in nested for pattern in (sub, f"{sub}.*")]
        found = find_packages(str(HERE / folder), exclude=exclude)
        packages += [name, *(f"{name}.{sub}" for sub in found)]
    return sorted(packages)


config = tomllib.loads((HERE / "pyproject.toml").read_text())
setup(packages=discover(config["tool"]["setuptools"]["package-dir"]))
