"""The README is one screen's entry to docs/; the pages made from data cover all of it."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from sparkbake.__main__ import parser

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def gen_pages() -> ModuleType:
    """docs/gen_pages.py, the generator and mkdocs hook, loaded as a module."""
    spec = importlib.util.spec_from_file_location("gen_pages", DOCS / "gen_pages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_section(page: str, heading: str) -> str:
    """The text under `## heading` of docs/PAGE, up to the next `## ` heading."""
    text = (DOCS / page).read_text()
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_fits_on_two_screens() -> None:
    assert len(README.read_text().splitlines()) < 200


def test_every_relative_link_of_the_readme_names_a_file_of_the_repository() -> None:
    targets = [t for t in LINK.findall(README.read_text())
               if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert targets, "the README links into docs/"
    missing = [t for t in targets if not (ROOT / t.split("#", 1)[0]).exists()]
    assert missing == []


def test_the_preflight_page_lists_every_rule_of_preflight_json(tmp_path: Path) -> None:
    [rules, _] = gen_pages().write_pages(tmp_path)
    listed = re.findall(r"^\| `([a-z0-9-]+)` \| (error|warning) \|", rules.read_text(),
                        re.MULTILINE)
    data = json.loads((ROOT / "images" / "preflight.json").read_text())
    assert listed == [(rule["id"], rule["level"]) for rule in data["rules"]]


def test_the_benchmarks_page_has_a_section_per_file(tmp_path: Path) -> None:
    [_, benchmarks] = gen_pages().write_pages(tmp_path)
    text = benchmarks.read_text()
    for path in (ROOT / "benchmarks").glob("*.json"):
        assert f"## {path.stem}\n" in text


def test_every_quoted_figure_names_a_value_of_its_benchmark_file() -> None:
    module = gen_pages()
    quotes = [match for page in DOCS.rglob("*.md")
              for match in module.QUOTE.finditer(page.read_text())]
    assert quotes
    for match in quotes:
        assert module.on_page_markdown(match.group(0)) != match.group(0)


def test_every_quote_of_a_benchmark_file_is_one_the_hook_replaces() -> None:
    written = re.compile(r"\{\{\s*[\w.-]+\.json:[^{}]*\}\}")
    for page in DOCS.rglob("*.md"):
        text = page.read_text()
        left = [m.group(0) for m in written.finditer(text) if not gen_pages().QUOTE.fullmatch(
            m.group(0))]
        assert not left, f"{page.name}: {left}"


def test_a_quote_of_a_missing_key_stops_the_build() -> None:
    with pytest.raises(KeyError, match=r"patch-apply\.json has no results\.nothing"):
        gen_pages().on_page_markdown("{{ patch-apply.json: results.nothing }}")


def test_every_page_a_message_names_exists() -> None:
    """An error's remedy that names docs/<page>.md names a page of the manual (or one the
    docs session generates)."""
    generator = (DOCS / "gen_pages.py").read_text()
    named = {match for source in [*(ROOT / "src").rglob("*.py"), *(ROOT / "images").glob("*.py")]
             for match in re.findall(r"docs/[a-z/-]+\.md", source.read_text())}
    assert named  # the messages do name pages
    missing = [page for page in sorted(named)
               if not (ROOT / page).is_file() and Path(page).name not in generator]
    assert missing == []


def test_a_serve_quote_is_the_command_the_program_prints_for_that_node() -> None:
    page = "Worker 1:\n\n    {{ serve: production-3.73-vision " \
           "images/smoke/dsv4-4node/accept/worker-1.env }}\n"
    shown = gen_pages().on_page_markdown(page)
    [command] = [line.strip() for line in shown.splitlines() if "vllm serve" in line]
    assert command.startswith("vllm serve /model --served-model-name deepseek-v4-vision ")
    assert " --node-rank 1 --headless " in command
    assert " --moe-backend b12x --linear-backend deep_gemm " in command  # the tag's defaults
    with pytest.raises(RuntimeError, match="gave no command"):
        gen_pages().on_page_markdown("{{ serve: production-3.73-vision no/such.env }}")


def test_the_four_sparks_page_quotes_its_commands_from_the_program() -> None:
    text = (DOCS / "how-to" / "four-sparks.md").read_text()
    assert "{{ serve: production-3.73-vision images/smoke/dsv4-4node/accept/worker-1.env }}" in text
    assert not re.search(r"^    vllm serve ", text, re.M)  # none typed in by hand


def test_the_cpu_path_is_shown_from_its_declaration_and_each_step_parses() -> None:
    """four-sparks.md's path on two CPU nodes comes from docs/how-to/cpu-path.yaml, which
    tests/integration/test_operator_path.py runs; each step is a command the parser takes."""
    text = (DOCS / "how-to" / "four-sparks.md").read_text()
    assert "{{ path: how-to/cpu-path.yaml }}" in text
    assert not re.search(r"^\s*sparkbake \w[\w-]* cpu-3\.73", text, re.M)  # none by hand
    declared = yaml.safe_load((DOCS / "how-to" / "cpu-path.yaml").read_text())
    shown = gen_pages().on_page_markdown("{{ path: how-to/cpu-path.yaml }}")
    commands = [step["run"] for step in declared["steps"]]
    assert [line for line in shown.splitlines() if line.startswith("sparkbake ")] == commands
    assert [shlex.split(command)[1] for command in commands] == [
        "node-files", "check-nodes", "up", "bench", "down"]
    for command in commands:
        assert parser().parse_args(shlex.split(command)[1:]).tag == declared["tag"]
