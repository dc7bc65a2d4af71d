"""Operator tools behind ``tierlog`` subcommands: what talks to a running broker, and a development ZooKeeper."""
