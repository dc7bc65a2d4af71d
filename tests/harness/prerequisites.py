"""Outside tools the suites need (Java and Maven for Apache Kafka, Spark's Kafka connector, kcat, moto).

Scripts under ``scripts/`` load by path; a missing prerequisite skips locally with the reason and
fails in CI (``CI`` set to true), so a CI run never passes without them.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from tests.harness import ROOT


def load_script(filename: str, module_name: str):
    """Import ``scripts/<filename>`` once, under ``module_name``."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "scripts" / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def unavailable(what: str, reason: str):
    """Fail in CI, skip elsewhere: ``what`` (e.g. "Apache Kafka peer") cannot run because of ``reason``."""
    if in_ci():
        pytest.fail(f"{what} unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"{what} unavailable: {reason}")
