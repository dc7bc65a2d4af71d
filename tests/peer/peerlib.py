"""Transition shim: these helpers moved to tests/harness/rawclient.py.

Kept only so branches written against the old path still import; it goes once they are merged.
"""

from tests.harness.rawclient import create_topic, unique, wait_for_leaders  # noqa: F401 - re-exported
