"""docs/operations.md's cluster section keeps the blocks scripts/cluster_tour.py runs (the run itself, a
ZooKeeper and four brokers for about a minute and a half, is ``python scripts/fresh_install.py --cluster``),
and each command of them is one ``tierlog`` knows."""

from __future__ import annotations

import shlex

from tests.harness.prerequisites import load_script
from tierlog.cli import build_parser


def test_the_cluster_section_has_the_blocks_the_tour_runs():
    docs = load_script("cluster_tour.py", "cluster_tour").section_commands()
    assert docs["start"] == ["tierlog zookeeper start"] + [
        f"tierlog broker -c config/cluster/broker-{i}.properties" for i in (1, 2, 3)]
    tour = docs["tour"]
    assert any(c.startswith("tierlog topic create orders") and "remote.storage.enable=true" in c and "-r 3" in c
               for c in tour), tour
    for word in ("produce", "consume", "tier status", "cluster info"):
        assert any(c.startswith(f"tierlog {word}") for c in tour), (word, tour)
    assert docs["adding"][-1] == "tierlog broker -c broker-4.properties"
    assert [c.split()[2] for c in docs["reassign"] if c.startswith("tierlog reassign")] == ["generate", "execute"]


def test_every_tierlog_command_of_the_tour_parses():
    docs = load_script("cluster_tour.py", "cluster_tour").section_commands()
    commands = [c for part in docs.values() for c in part if c.startswith("tierlog ")]
    assert len(commands) >= 12, commands
    for command in commands:
        argv = shlex.split(command.split(" <")[0].split(" >")[0])[1:]
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:  # argparse's refusal
            raise AssertionError(f"{command!r} does not parse") from exc
