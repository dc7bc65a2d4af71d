"""Tiered storage (KIP-405): remote storage managers, the remote log metadata manager and the
remote log manager that copies, expires and reads back closed segments."""
