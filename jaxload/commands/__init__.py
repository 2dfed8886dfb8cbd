"""Subcommands of the `jaxload` CLI, one module each (see jaxload/cli.py)."""
