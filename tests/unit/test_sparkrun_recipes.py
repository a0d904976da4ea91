"""`sparkbake recipe`: a sparkrun recipe of a tag's release record, and its faults, each one
line and its exit code. Pure file work on a copy of this project's versions.yaml; sparkrun's
own check of the recipes is tests/integration/test_sparkrun_recipes.py."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkbake import records, resources
from sparkbake.__main__ import main, parser
from sparkbake.config import versions
from sparkbake.nodes import envfile
from sparkbake.publish.record import Release
from sparkbake.run import Run
from sparkbake.sparkrun import recipes
from tests import tiny_model
from tests.conftest import Project, plain_console, settings_of

from .test_docs import gen_pages

ROOT = Path(__file__).parents[2]
GOLDEN = ROOT / "tests" / "data" / "records"
HEAD = resources.path("smoke/dsv4-4node/accept/head.env")


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    """This project's versions.yaml in a folder of its own: its build/ is the test's."""
    shutil.copy(ROOT / "versions.yaml", tmp_path / "versions.yaml")
    return tmp_path / "versions.yaml"


def published(config_path: Path, tag: str, golden: str = "release.json") -> dict[str, Any]:
    """A release record of tag as publish writes it (a golden record's, renamed)."""
    record: dict[str, Any] = json.loads((GOLDEN / golden).read_text())
    record["tag"] = tag
    folder = config_path.parent / "build" / "releases"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{tag}.json").write_text(json.dumps(record))
    return record


def recipe_of(config_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    assert main(["--config", str(config_path), "recipe", *args]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def run_of(config_path: Path) -> Run:
    return Run.of(versions.load(config_path), settings_of(), plain_console())


def test_a_published_tag_is_pinned_by_its_release_digest(
        config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = published(config_path, "demo")
    made = recipe_of(config_path, capsys, "demo", "--model", "org/tiny")
    assert made["container"] == record["pinned"]
    assert made["metadata"]["sparkbake"] == {
        "tag": "demo", "release": "demo", "digest": record["digest"],
        "published": record["published"], "env_file": "serve.env",
        "serve_command": made["metadata"]["sparkbake"]["serve_command"]}
    assert (made["recipe_version"], made["runtime"], made["model"]) == (
        "2", "vllm-distributed", "org/tiny")


def test_the_command_is_the_images_entrypoint_as_the_bake_sets_it(
        config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    published(config_path, "demo")
    made = recipe_of(config_path, capsys, "demo", "--model", "org/tiny")
    runtime = json.loads(resources.path("runtime.json").read_text())
    assert shlex.split(made["command"]) == runtime["entrypoint"]


def test_the_production_recipe_is_the_suites_head_without_what_sparkrun_owns(
        config_path: Path) -> None:
    """Four nodes at TP 4 from the reference head; its rendezvous, addresses, fabric and
    host paths are sparkrun's (appended flags, its probes, its mounts), its node count and
    rank sparkrun's launch's, its port, name, TP and model path sparkrun's config's, the
    rest is the file's."""
    run = run_of(config_path)
    made = recipes.recipe_for(run, run.config.tag("production-3.73-vision"), local=True)
    head = envfile.read(HEAD).values
    assert (made["min_nodes"], made["max_nodes"], made["defaults"]) == (4, 4, {
        "port": 8300, "tensor_parallel": 4, "served_model_name": "deepseek-v4-vision"})
    assert made["model"] == head["MODEL_HOST_PATH"]
    assert made["env"] == {
        "NNODES": "{launch.num_nodes}", "NODE_RANK": "{launch.node_rank}", "DCP_SIZE": "1",
        "KV_CACHE_MEMORY_BYTES": "", "GPU_MEMORY_UTILIZATION": "0.75",
        "MAX_MODEL_LEN": "393216", "MAX_NUM_SEQS": "8", "MAX_NUM_BATCHED_TOKENS": "8192",
        "VLLM_ENABLE_DSPARK": "1", "NUM_SPECULATIVE_TOKENS": "6",
        "DSPARK_DRAFT_SAMPLE_METHOD": "greedy", "MAX_CUDAGRAPH_CAPTURE_SIZE": "56",
        "CUDAGRAPH_CAPTURE_SIZES": head["CUDAGRAPH_CAPTURE_SIZES"],
        "VLLM_CUDAGRAPH_MODE": "FULL_AND_PIECEWISE", "ENABLE_PREFIX_CACHING": "1",
        "MODEL": "{launch.model_path}", "API_PORT": "{config.port}",
        "SERVED_MODEL_NAME": "{config.served_model_name}",
        "TP_SIZE": "{config.tensor_parallel}"}
    assert made["container"] == "localhost:5000/sparkrun-vllm-ds4-gb10:production-3.73-vision"
    assert made["metadata"]["sparkbake"]["local"] is True
    assert made["readiness"] == {"inference": True, "inference_style": "openai-chat-stream-v1"}


def test_a_multi_platform_release_is_one_container_on_its_index(config_path: Path) -> None:
    """sparkrun's `containers:` binds images to host names; the index lets each node's
    engine take its own platform's image under one reference."""
    record = records.from_json(Release, published(config_path, "demo", "release-multi.json"))
    run = run_of(config_path)
    made = recipes.recipe_for(run, run.config.tag("demo"), record, model="org/tiny")
    assert "containers" not in made
    assert made["container"] == record.pinned
    assert made["metadata"]["sparkbake"]["platforms"] == {
        p.tag: p.digest for p in record.platforms}


def test_out_writes_the_file_and_nothing_on_stdout(
        config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    published(config_path, "demo")
    out = tmp_path / "recipes" / "demo.yaml"
    assert main(["--config", str(config_path), "recipe", "demo", "--model", "org/tiny",
                 "--out", str(out)]) == 0
    shown = capsys.readouterr()
    assert shown.out == "" and f"recipe: {out}" in shown.err
    assert yaml.safe_load(out.read_text())["model"] == "org/tiny"


def error_of(config_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["--config", str(config_path), "recipe", *args]) == 2
    shown = capsys.readouterr()
    assert shown.out == ""
    return shown.err


def test_an_unknown_tag_is_one_line_naming_the_nearest(
        config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(config_path, capsys, "demoo")
    first, remedy = err.splitlines()
    assert first == f"sparkbake: error: {config_path}: no tag 'demoo' (did you mean 'demo'?)"
    assert remedy.startswith("  -> known tags: cpu-3.73, demo, ")


def test_an_unpublished_tag_says_publish_it_or_local(
        config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(config_path, capsys, "demo", "--model", "org/tiny")
    record = config_path.parent / "build" / "releases" / "demo.json"
    assert err == (
        f"sparkbake: error: demo is not published: no release record {record}\n"
        f"  -> publish it (`sparkbake --config {config_path} publish demo`), or make the "
        "recipe of the local image with --local\n")


def test_an_out_that_cannot_be_written_is_one_line(
        config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    published(config_path, "demo")
    folder = tmp_path / "taken"
    folder.mkdir()
    err = error_of(config_path, capsys, "demo", "--model", "org/tiny", "--out", str(folder))
    assert err == (f"sparkbake: error: --out {folder}: cannot be written (Is a directory)\n"
                   "  -> give a file in a folder you can write\n")
    assert list(folder.iterdir()) == []  # no temporary file left


def test_no_model_anywhere_is_one_line(
        config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(config_path, capsys, "demo", "--local")
    serve = resources.path("smoke/common/serve.env")
    assert err == (
        f"sparkbake: error: no model for demo's recipe: {serve} sets no MODEL_HOST_PATH\n"
        "  -> give --model: a Hugging Face repository or the model's folder on every node "
        f"(`sparkbake --config {config_path} recipe demo --local --model ORG/NAME`)\n")


def test_values_the_entrypoint_refuses_are_one_line_naming_the_file(
        config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.env"
    bad.write_text("MODEL_HOST_PATH=/srv/m\nLIMIT_MM_IMAGES=four\n")
    err = error_of(config_path, capsys, "demo", "--local", "--env-file", str(bad))
    assert err.startswith(f"sparkbake: error: {bad}: the image's entrypoint makes no command "
                          "of these values for demo: ")
    assert len(err.splitlines()) == 2 and "Traceback" not in err


def test_a_recipe_for_another_release_record_keeps_the_tags_settings(config_path: Path) -> None:
    run = run_of(config_path)
    record = records.from_json(Release, published(config_path, "demo"))
    renamed = dataclasses.replace(record, tag="demo-rc")
    made = recipes.recipe_for(run, run.config.tag("demo"), renamed, model="org/tiny")
    assert made["metadata"]["sparkbake"]["release"] == "demo-rc"


def test_the_sparkrun_page_quotes_its_recipe_from_the_program() -> None:
    """docs/how-to/sparkrun.md: the recipe shown is what `sparkbake recipe` prints, none
    typed in by hand, and each sparkbake command of its shell blocks parses."""
    text = (ROOT / "docs" / "how-to" / "sparkrun.md").read_text()
    assert "{{ recipe: production-3.73-vision --local }}" in text
    assert "recipe_version:" not in text
    shown = gen_pages().on_page_markdown("{{ recipe: production-3.73-vision --local }}")
    assert yaml.safe_load(shown)["metadata"]["sparkbake"]["tag"] == "production-3.73-vision"
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)
    commands = [shlex.split(line) for block in blocks for line in block.splitlines()
                if line.startswith("sparkbake ")]
    assert [c[1] for c in commands][:2] == ["publish", "recipe"]
    for command in commands:
        parsed = parser().parse_args(command[1:])
        if command[1] in ("publish", "recipe"):
            assert parsed.tag == "production-3.73-vision"
    with pytest.raises(RuntimeError, match="gave no recipe"):
        gen_pages().on_page_markdown("{{ recipe: no-such-tag }}")


def test_a_multi_platform_release_on_the_command_line_is_its_index(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    record = published(project.config_path, "fixture-multi", "release-multi.json")
    made = recipe_of(project.config_path, capsys, "fixture-multi", "--model", "org/tiny")
    assert made["container"] == record["pinned"]
    assert made["metadata"]["sparkbake"]["platforms"] == {
        p["tag"]: p["digest"] for p in record["platforms"]}


def test_a_multi_platform_tag_is_refused_local_and_unpublished_in_one_line(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(project.config_path, capsys, "fixture-multi", "--local")
    assert err == (
        "sparkbake: error: fixture-multi is a multi-platform tag: its local images are one "
        "per platform, and a recipe names one image\n"
        "  -> name one platform's tag with --local (fixture-multi-amd64, "
        "fixture-multi-arm64), or publish it\n")
    err = error_of(project.config_path, capsys, "fixture-multi", "--model", "org/tiny")
    record = project.root / "build" / "releases" / "fixture-multi.json"
    assert err == (
        f"sparkbake: error: fixture-multi is not published: no release record {record}\n"
        f"  -> publish it (`sparkbake --config {project.config_path} publish fixture-multi`), "
        "or make the recipe of one platform's local image (fixture-multi-amd64, "
        "fixture-multi-arm64) with --local\n")


def test_a_model_folder_without_a_chat_template_is_ready_at_its_health(
        config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """sparkrun probes a token only by chat (0.4.2: chat, responses, Anthropic messages,
    each through the chat template), so a model folder here with no template is ready at
    /health, said in one line; tests/tiny_model.py's models have one."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "tokenizer_config.json").write_text('{"bos_token": "<s>"}')
    assert main(["--config", str(config_path), "recipe", "cpu-3.73", "--local", "--model",
                 str(plain)]) == 0
    shown = capsys.readouterr()
    assert yaml.safe_load(shown.out)["readiness"] == {"inference": False}
    assert f"recipe: {plain} has no chat template, and sparkrun probes a token only by chat: " \
        "the recipe's readiness is /health (inference: false); give the model a chat " \
        "template to be ready at the first token\n" in shown.err
    (plain / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    chat = {"inference": True, "inference_style": "openai-chat-stream-v1"}
    assert recipe_of(config_path, capsys, "cpu-3.73", "--local", "--model",
                     str(plain))["readiness"] == chat
    assert recipe_of(config_path, capsys, "cpu-3.73", "--local", "--model",
                     str(tiny_model.make(tmp_path / "tiny")))["readiness"] == chat
    assert "chat template" not in capsys.readouterr().err


def test_the_tiny_models_chat_template_renders_a_conversation() -> None:
    """As transformers renders a chat template (a sandboxed Jinja environment, blocks
    trimmed), so that vLLM can make a prompt of sparkrun's readiness chat."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) \
        .from_string(tiny_model.CHAT_TEMPLATE)
    messages = [{"role": "user", "content": "Reply with exactly: sparkrun-ready"}]
    assert template.render(messages=messages, add_generation_prompt=True) == \
        "user: Reply with exactly: sparkrun-ready\nassistant: "
