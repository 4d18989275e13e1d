"""mkdocs hook: lay the package out as installed before the API pages are collected.

mkdocstrings finds modules by walking folders, not through setuptools' package-dir, so the API
pages read ``build/layout/serverfarm_gym`` (tools/static_checks.py; links into the repository)."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

_CHECKS = Path(__file__).with_name("static_checks.py")


def on_config(config: Any) -> Any:
    runpy.run_path(str(_CHECKS))["lay_out"]()
    return config
