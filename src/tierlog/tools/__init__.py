"""Operator tools behind ``tierlog`` subcommands that talk to a running broker."""
