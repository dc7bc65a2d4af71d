"""docs/configuration.md is generated from the table and must be kept up to date."""

from pathlib import Path

from tierlog.config.definitions import ALL_CONFIGS, DELIBERATE_DIFFERENCES
from tierlog.config.docs import REGENERATE, render_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_configuration_doc_is_up_to_date():
    expected = render_markdown()
    actual = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    assert actual == expected, (
        f"{DOC} is stale: it no longer matches src/tierlog/config/definitions.py. "
        f"Regenerate it from the repository root with:\n    {REGENERATE}\n"
        "(or: tierlog config docs --output docs/configuration.md) and commit the result."
    )


def test_every_setting_and_difference_is_rendered():
    text = render_markdown()
    for defn in ALL_CONFIGS:
        assert f"| `{defn.name}` |" in text, defn.name
    assert "## Deliberate differences from Kafka" in text
    for diff in DELIBERATE_DIFFERENCES:
        assert diff.reason.replace("|", "\\|") in text
    # topic settings show their broker default keys in precedence order
    assert "`log.retention.ms` > `log.retention.minutes` > `log.retention.hours`" in text


def test_render_is_deterministic():
    assert render_markdown() == render_markdown()
