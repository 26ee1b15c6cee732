"""The package list in pyproject.toml matches the tree: a sub-package missing from it would
be absent from a non-editable install (wheels, Colab) while every test here still passes."""

from __future__ import annotations

import os
import tomllib

from support import REPO


def _packages_in_tree() -> set[str]:
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        dirs = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    found = set()
    for package, folder in dirs.items():
        root = os.path.join(REPO, folder)
        for here, subdirs, files in os.walk(root):
            subdirs[:] = [d for d in subdirs if not d.startswith((".", "__"))]
            if "__init__.py" in files:
                rel = os.path.relpath(here, root)
                name = package if rel == "." else package + "." + rel.replace(os.sep, ".")
                if not any(name.startswith(other + ".") and other != package and
                           dirs[other].startswith(folder + "/") for other in dirs):
                    found.add(name)
    return found


def test_every_package_in_the_tree_is_listed_in_pyproject():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    assert _packages_in_tree() == listed
