"""``python -m tierlog``: the same as the ``tierlog`` console command."""

from tierlog.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
