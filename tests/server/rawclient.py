"""Transition shim: ``RawClient`` moved to tests/harness/rawclient.py.

Kept only so branches written against the old path still import; it goes once they are merged.
"""

from tests.harness.rawclient import RawClient  # noqa: F401 - re-exported for the transition
