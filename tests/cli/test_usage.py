"""The command line without a broker: --version, completion, misspellings, bad values, missing extras,
and the output helpers."""

from __future__ import annotations

import argparse
import importlib.metadata

import pytest

from tests.cli.clilib import ok, one_error_line, tierlog
from tierlog.client.types import ConsumerRecord


def test_version_is_the_package_version():
    result = ok("--version")
    assert result.stdout.strip() == f"tierlog {importlib.metadata.version('tierlog')}"


@pytest.mark.parametrize("shell, marker", [("bash", "complete"), ("zsh", "#compdef")])
def test_completion_scripts_know_the_commands(shell, marker):
    script = ok("completion", shell).stdout
    assert marker in script
    for word in ("topic", "reset-offsets", "--bootstrap-server", "--to-earliest", "alter-config"):
        assert word in script, word


def test_misspelled_subcommand_gets_the_subcommand_usage_and_a_suggestion():
    result = tierlog("topic", "craete", "demo")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    usage, error = result.stderr.strip().splitlines()
    assert usage.startswith("usage: tierlog topic ")
    assert error.startswith("tierlog: error: ") and error.endswith("did you mean 'create'?")
    result = tierlog("grup", "list")
    assert "usage: tierlog [" in result.stderr and "did you mean 'group'?" in result.stderr


def test_misspelled_flag_gets_that_subcommands_usage_and_a_suggestion():
    result = tierlog("topic", "create", "demo", "--partitons", "3")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: tierlog topic create ")
    assert result.stderr.strip().splitlines()[-1] == \
        "tierlog: error: unrecognized arguments: --partitons 3; did you mean --partitions?"
    result = tierlog("group", "reset-offsets", "g", "--all-topics", "--to-erliest")
    assert result.stderr.startswith("usage: tierlog group reset-offsets ")
    assert "did you mean --to-earliest?" in result.stderr


@pytest.mark.parametrize("args, fragment", [
    (("topic", "create", "demo", "--config", "retention.ms"), "expected key=value, got 'retention.ms'"),
    # -c names a properties file in every command; a setting given to it says where settings go
    (("topic", "create", "demo", "-c", "retention.ms=1"), "-c takes a .properties file (the broker's configuration), "
                                                          "not a setting like 'retention.ms=1'; a topic setting is "
                                                          "--config KEY=VALUE"),
    (("broker", "-c", "log.dirs=/tmp/x"), "a broker setting is -o KEY=VALUE"),
    (("topic", "list", "-b", "127.0.0.1"), "bad broker address '127.0.0.1' (--bootstrap-server); give HOST:PORT, "
                                           "e.g. 127.0.0.1:9092"),
    (("produce", "t", "-X", "bootstrap.servers=127.0.0.1"), "127.0.0.1 (expected host:port) (-X)"),
    (("produce", "demo", "-H", "nokey"), "expected key=value"),
    (("consume", "demo", "--from", "yesterday"), "invalid start 'yesterday'"),
    (("consume", "demo", "--from", "@not-a-time"), "invalid time 'not-a-time'"),
    (("consume", "demo", "--format", "%v %x"), "unknown field %x"),
    (("group", "reset-offsets", "g", "--all-topics", "--to-offset", "-3"), "expected an offset"),
    (("group", "reset-offsets", "g", "--all-topics", "--to-datetime", "soon"), "invalid time 'soon'"),
    (("topic", "create", "demo", "-p", "zero"), "expected a whole number"),
    (("consume", "demo", "--timeout", "0"), "more than 0 seconds"),
])
def test_a_bad_value_is_one_line(args, fragment):
    result = tierlog(*args)
    assert result.returncode == 2
    one_error_line(result, fragment)


def test_missing_spark_extra_names_the_pip_command(tmp_path):
    # pyspark is installed here; a package of that name that fails to import as a missing one does
    # stands in for an environment without the extra
    (tmp_path / "pyspark").mkdir()
    (tmp_path / "pyspark" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pyspark'\", name='pyspark')\n")
    result = tierlog("spark", "audit", "--bootstrap-server", "127.0.0.1:9", paths=[tmp_path])
    one_error_line(result, "spark extra", "pip install 'tierlog[spark]'")


def test_debug_shows_the_traceback():
    result = tierlog("--debug", "topic", "list", "-b", "127.0.0.1:9", "--timeout", "0.5")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_sizes_and_ages_for_people():
    from tierlog.cli.output import age, size

    assert [size(n) for n in (0, 1023, 1024, 1536, 10 * 2**20, 3 * 2**30 + 2**29)] == \
        ["0 B", "1023 B", "1.0 KiB", "1.5 KiB", "10.0 MiB", "3.5 GiB"]
    now = 1_700_000_000_000
    assert [age(now - d, now) for d in (200, 42_000, 3 * 60_000 + 5, 5 * 3_600_000, 2 * 86_400_000)] == \
        ["just now", "42s ago", "3m ago", "5h ago", "2d ago"]
    assert age(now + 120_000, now) == "in 2m"


def test_format_fields():
    from tierlog.cli.consume import compile_format

    r = ConsumerRecord("t", 2, 41, 1_700_000_000_123, 0, b"k1", b"v\x00v", (("h", b"1"), ("n", None)), 0)
    fmt = compile_format(r"%t/%p@%o %k=%v %T %d [%h] %K %V 100%%\t|\n")
    assert fmt(r) == b"t/2@41 k1=v\x00v 1700000000123 2023-11-14T22:13:20.123+00:00 [h=1,n=] 2 3 100%\t|\n"
    null = r._replace(key=None, value=None)
    assert compile_format("%K %V [%k][%v]")(null) == b"-1 -1 [][]"
    with pytest.raises(argparse.ArgumentTypeError):
        compile_format("%q")


def test_a_command_writes_nothing_into_its_working_directory(tmp_path):
    """kio registers its types with hypothesis when the test extra is installed, and hypothesis then caches
    Unicode tables in .hypothesis/ under the working directory; a command (a broker's too) must not."""
    import hypothesis  # noqa: F401 - the case only exists where hypothesis is installed

    result = tierlog("topic", "list", "--bootstrap-server", "127.0.0.1:1", cwd=tmp_path, timeout=60)
    assert result.returncode != 0
    assert list(tmp_path.iterdir()) == []
