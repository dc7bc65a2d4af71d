"""Transition shim: these helpers moved to tests/harness/prerequisites.py.

Kept only so branches written against the old path still import; it goes once they are merged.
"""

from tests.harness.prerequisites import in_ci, load_script, unavailable  # noqa: F401 - re-exported
