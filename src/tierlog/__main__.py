"""``python -m tierlog`` and the ``tierlog`` console command."""

import sys


def main() -> int:
    # kio registers its types with hypothesis whenever hypothesis is installed (the test extra brings it), and
    # hypothesis then caches Unicode tables in .hypothesis/ under the working directory: a broker's data folder
    # or a user's. No command uses hypothesis, so they run as if it were not installed.
    sys.modules.setdefault("hypothesis", None)
    from tierlog.cli import main as cli_main
    return cli_main()


if __name__ == "__main__":
    raise SystemExit(main())
