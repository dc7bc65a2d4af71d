"""The broker's side of tiered storage (KIP-405): building the remote log manager with its storage plugin and
metadata manager (``builder.py``: ``build_tiered_storage``), and the reads of a fetch answered from the remote
tier (``remote_fetch.py``). The remote log manager itself lives in ``tierlog.tiered``."""
