"""The manual's pages made from data, and the figures its pages quote from benchmarks/.

Run as a script (`python docs/gen_pages.py [--out DIR]`, the `docs` nox session does) it
writes reference/preflight-rules.md from images/preflight.json and reference/benchmarks.md
from benchmarks/*.json. Loaded by mkdocs as a hook (mkdocs.yml `hooks:`), it replaces each
`{{ FILE.json: KEY.PATH }}` in a page with that value of benchmarks/FILE.json, so a measured
figure is quoted from its file, never retyped; an unknown file or key stops the build. And
each `{{ serve: TAG NODE.env }}` with the `vllm serve` command the program prints for that
node (`sparkbake check-env NODE.env --tag TAG --print`), and each
`{{ up: TAG HOSTS NODE.env ... }}` with the commands `sparkbake up TAG NODE.env ... --hosts
HOSTS --print` prints, so a command the manual shows is the program's own. And
`{{ commands }}` with the list of commands and their options, made from the table the
CLI's parser is made from (src/sparkbake/command_table.py). And `{{ path: FILE.yaml }}` with
the operator's path that docs/FILE.yaml declares (its files, then one command a step), the
one tests/integration/test_operator_path.py runs. And `{{ recipe: TAG ARGS }}` with the
sparkrun recipe `sparkbake recipe TAG ARGS` prints.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from sparkbake.command_table import COMMANDS as COMMAND_TABLE
from sparkbake.command_table import Option

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "images" / "preflight.json"
BENCHMARKS = ROOT / "benchmarks"
QUOTE = re.compile(r"\{\{\s*([\w.-]+\.json):\s*([\w.-]+)\s*\}\}")
SERVE = re.compile(r"\{\{\s*serve:\s*([\w.-]+)\s+([\w./-]+\.env)\s*\}\}")
COMMANDS = re.compile(r"\{\{\s*commands\s*\}\}")
UP = re.compile(r"\{\{\s*up:\s*([\w.-]+)\s+(\S+)\s+((?:[\w./-]+\.env\s+)+)\}\}")
STEPS = re.compile(r"\{\{\s*path:\s*([\w./-]+\.yaml)\s*\}\}")
RECIPE = re.compile(r"\{\{\s*recipe:\s*([^}]+?)\s*\}\}")

PREFLIGHT_INTRO = """\
# Preflight rules

Generated from `images/preflight.json` by `docs/gen_pages.py`: edit the rules there, not
here. How the rules are read and where they run: [Preflight](preflight.md). A rule is
`error` (the entrypoint refuses to start, `check-env` exits 2) or `warning` (printed).
`{NAME}` and `{expression}` in a message or reason are filled in from the node's values.
"""

VARIABLES_INTRO = """\
Every variable the rules know (`variables`): its type, its use (`flag`: the entrypoint makes
a `vllm serve` flag of it; `env`: read by vLLM or the series; `launcher`: for the launcher on
the host, the image ignores it; `sparkbake`: read by the entrypoint's preflight; `unread`:
set by the reference deployment, read by nothing in the image), the values a number may take
(`min`, `max`, `above`: out of range is a `bad-value` error) and, where a rule needs it, what
an unset one means."""

SYSCTL = {"min": "{name} < {limit}", "max": "{name} > {limit}",
          "max-nonzero": "{name} not in 1 … {limit}"}
CHECKS = {
    "types": "a known variable's value is not of its type (see the variables below)",
    "lengths": "a variable's `NAME=VALUE` and its NUL are longer than {max_bytes} bytes",
    "backends": "{variables} is not a backend name the image's vLLM version knows",
    "backend-packages": "{variables} names a backend whose Python module the image lacks",
    "typos": "a variable no table knows is close to one that is (similarity {cutoff} or more)",
    "backend-capability": "{variables} names a backend that vLLM's own checks say cannot run "
                          "the tag's model family on its GPU (`backend-verdicts.json`)",
    "backend-verdicts": "{variables} is set, and `backend-verdicts.json` has no verdicts of "
                        "the image's vLLM version for its model family and GPU",
    "kho": "the host's `proc/meminfo` shows Kexec HandOver's tell (`CmaFree` within "
           "{cma_free_gib} GiB while `CmaTotal` is at most {cma_total_kib} kB) and "
           "`proc/cmdline` has no `kho=off`; with `NNODES` > 1 (on one node: a warning)",
    "roles": "the {role} (a worker: NNODES > 1 and NODE_RANK > 0; else the head) is given "
             "{refuses} in `SERVE_EXTRA_ARGS`",
    "model-files": "the model's config.json or model.safetensors.index.json is there but not "
                   "JSON (or its weight_map is not an object, or a DeepSeek-V4 config's "
                   "compress_ratios is not 0, 4 or 128 per layer)",
    "model-index": "the model has no model.safetensors.index.json with metadata.total_size",
    "cache-folder": "the folder `MODEL` names is a Hugging Face cache folder (`snapshots/` in "
                    "it, no config.json)",
    "text-checkpoint": "`LIMIT_MM_IMAGES` is above 0 (or unset) and the DeepSeek-V4 "
                       "checkpoint has no vision tower (`vision_n_layers`)",
    "dspark-config": "`VLLM_ENABLE_DSPARK` is on and the DeepSeek-V4 checkpoint's config.json "
                     "has no list of `dspark_target_layer_ids`",
    "max-model-len": "`MAX_MODEL_LEN` is above the length vLLM derives from the model's "
                     "config.json (its length keys, the rope factor, a pooling model's "
                     "tokenizer_config.json `model_max_length`)",
    "moe-shape": "`MOE_BACKEND` is b12x and the model's MXFP4 experts, at this TP_SIZE, have "
                 "expert parallelism or a per-rank intermediate size not a multiple of 32",
    "moe-activations": "`MOE_BACKEND` is b12x and the model's hidden size is not a multiple "
                       "of 256",
    "linear-shape": "`LINEAR_BACKEND` is b12x and a block-FP8 linear layer of the model, at "
                    "this TP_SIZE, has weight blocks other than 128 x 128 or N or K per rank "
                    "not a multiple of 128",
    "fit": "on the rank with the least room (the head, with the API server), device memory "
           "x GPU_MEMORY_UTILIZATION less the non-KV share (weights / TP_SIZE, activations, "
           "graphs, runtime: a model fitted to the reference's figures, or what `up` "
           "measured) cannot hold one request of MAX_MODEL_LEN as vLLM's planner sizes it",
    "kv-pin": "`KV_CACHE_MEMORY_BYTES` (or `VLLM_CPU_KVCACHE_SPACE`) plus the non-KV share "
              "leaves the host less than earlyoom's floor and vm.min_free_kbytes, or the pin "
              "cannot hold one request of MAX_MODEL_LEN",
    "free-memory": "the GPU's free memory now (on a GB10 the host's MemAvailable) < device "
                   "memory x GPU_MEMORY_UTILIZATION; not checked where the free memory is not "
                   "known (no GPU, check-env)",
    "host-margin": "(1 - GPU_MEMORY_UTILIZATION) x device memory is below what the reference "
                   "deployment's host needed (preflight.json `memory`), and the utilization "
                   "is above what the memory budget needs",
}


def cell(text: object) -> str:
    """Text made safe for one cell of a Markdown table."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text: object) -> str:
    """Inline code for a table cell; backquotes inside become plain quotes."""
    return "`" + cell(text).replace("`", "'") + "`"


def trigger(rule: dict[str, Any]) -> str:
    """What makes the rule fire: its `when` expression, or its check's own condition (and
    its `when`, where a check's rule has one)."""
    if "check" not in rule:
        return code(rule["when"])
    if rule.get("check") == "sysctls":
        limits = [SYSCTL[kind].format(name=code(name), limit=limit)
                  for name, limit, kind in rule["sysctls"]]
        return ", ".join(limits) + " (or `/proc/sys` unreadable)"
    described = CHECKS[rule["check"]]
    names = ", ".join(code(name) for name in rule.get("variables", {}))
    refuses = ", ".join(code(option) for option in rule.get("refuses", []))
    band = " … ".join(str(gib) for gib in rule.get("cma_free_gib", []))
    fires = cell(described.format(variables=names, cutoff=rule.get("cutoff", ""),
                                  role=rule.get("role", ""), refuses=refuses,
                                  cma_free_gib=band, cma_total_kib=rule.get("cma_total_kib"),
                                  max_bytes=rule.get("max_bytes")))
    return f"{fires}, and {code(rule['when'])}" if "when" in rule else fires


def rule_rows(rules: list[dict[str, Any]]) -> list[str]:
    """The rules' table: id, level, what triggers it, its message and its reason."""
    rows = ["| rule | level | fires when | message | reason |", "|---|---|---|---|---|"]
    for rule in rules:
        at = f" (at {code(rule['at'])})" if "at" in rule else ""
        rows.append(f"| `{rule['id']}` | {rule['level']} | {trigger(rule)}{at} | "
                    f"{code(rule['message'])} | {cell(rule['reason'])} |")
    return rows


def variable_rows(variables: dict[str, dict[str, Any]]) -> list[str]:
    """The known variables' table: name, type, use, range and what an unset one means."""
    rows = ["| variable | type | use | range | unset means |", "|---|---|---|---|---|"]
    for name, spec in variables.items():
        unset = code(spec["unset_means"]) if "unset_means" in spec else ""
        rows.append(f"| `{name}` | {spec['type']} | {spec['use']} | {value_range(spec)} | "
                    f"{unset} |")
    return rows


def value_range(spec: dict[str, Any]) -> str:
    """A variable's range as `> 0`, `1 … 65535`, `≥ 1` ("" without one), and the words it
    takes besides (`≥ 0 or `auto``)."""
    words = "".join(f" or {code(word)}" for word in spec.get("words", ()))
    return _bounds(spec) + words


def _bounds(spec: dict[str, Any]) -> str:
    low = f"> {spec['above']}" if "above" in spec else None
    if "min" in spec and "max" in spec:
        return f"{spec['min']} … {spec['max']}"
    if "min" in spec:
        low = f"≥ {spec['min']}"
    high = f"≤ {spec['max']}" if "max" in spec else None
    return ", ".join(part for part in (low, high) if part)


def preflight_page(data: dict[str, Any]) -> str:
    """reference/preflight-rules.md: every rule, then every variable the rules know."""
    parts = [PREFLIGHT_INTRO, "## Rules", "", *rule_rows(data["rules"]), "",
             "## Variables", "", VARIABLES_INTRO, "", *variable_rows(data["variables"]), ""]
    return "\n".join(parts)


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """A JSON value as (dotted key, leaf) pairs; lists of plain values are one leaf."""
    if isinstance(value, dict):
        return [pair for key, item in value.items()
                for pair in flatten(item, f"{prefix}.{key}" if prefix else key)]
    return [(prefix, value)]


def shown(value: Any) -> str:
    """A leaf as the pages print it: numbers as they are, lists comma-separated."""
    if isinstance(value, list):
        return ", ".join(shown(item) for item in value)
    return str(value)


def benchmark_section(path: Path) -> list[str]:
    """One benchmark file's heading and every figure in it."""
    data = json.loads(path.read_text())
    rows = [f"## {path.stem}", "", f"`benchmarks/{path.name}`: {data.get('benchmark', '')}", "",
            "| key | value |", "|---|---|"]
    rows += [f"| `{key}` | {cell(shown(value))} |" for key, value in flatten(data)
             if key != "benchmark"]
    return [*rows, ""]


def benchmarks_page(files: list[Path]) -> str:
    """reference/benchmarks.md: every file of benchmarks/, figure by figure."""
    intro = ["# Benchmarks", "",
             "Generated from `benchmarks/*.json` by `docs/gen_pages.py`; each file is written by "
             "its nox session (see [Develop and test](../how-to/develop.md#benchmarks)) with the "
             "machine it ran on. The other pages quote their figures from these files.", ""]
    return "\n".join(intro + [line for path in files for line in benchmark_section(path)])


def quote(name: str, key: str) -> str:
    """The value at KEY of benchmarks/NAME, as a page prints it."""
    value: Any = json.loads((BENCHMARKS / name).read_text())
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"benchmarks/{name} has no {key}")
        value = value[part]
    return shown(value)


def serve_command(tag: str, env_file: str) -> str:
    """The `vllm serve` line that check-env --print gives for the node's file."""
    ran = subprocess.run([sys.executable, "-m", "sparkbake", "--config",
                          str(ROOT / "versions.yaml"), "check-env", str(ROOT / env_file),
                          "--tag", tag, "--print"], capture_output=True, text=True,
                         check=False, cwd=ROOT)
    lines = [line for line in ran.stdout.splitlines() if line.startswith("vllm serve ")]
    if ran.returncode != 0 or len(lines) != 1:
        raise RuntimeError(f"check-env {env_file} --tag {tag} --print gave no command: "
                           f"{ran.stderr.strip()[-300:]}")
    return lines[0]


def up_commands(tag: str, hosts: str, env_files: list[str]) -> str:
    """What `sparkbake up TAG FILES --hosts HOSTS --print` prints: the by-hand start."""
    ran = subprocess.run([sys.executable, "-m", "sparkbake", "--config",
                          str(ROOT / "versions.yaml"), "up", tag, *env_files, "--hosts", hosts,
                          "--print"], capture_output=True, text=True, check=False, cwd=ROOT)
    if ran.returncode != 0 or "docker run" not in ran.stdout:
        raise RuntimeError(f"up {tag} --print gave no commands: {ran.stderr.strip()[-300:]}")
    return ran.stdout.rstrip("\n")


def recipe_text(args: str) -> str:
    """What `sparkbake recipe ARGS` prints: a tag's sparkrun recipe."""
    ran = subprocess.run([sys.executable, "-m", "sparkbake", "--config",
                          str(ROOT / "versions.yaml"), "recipe", *args.split()],
                         capture_output=True, text=True, check=False, cwd=ROOT)
    if ran.returncode != 0 or not ran.stdout.startswith("recipe_version:"):
        raise RuntimeError(f"recipe {args} gave no recipe: {ran.stderr.strip()[-300:]}")
    return ran.stdout.rstrip("\n")


def operator_path(name: str) -> str:
    """The path docs/NAME declares: each file as a block under its name, then one shell block
    of the steps, each under a comment saying what it does and how it ends."""
    declared = yaml.safe_load((ROOT / "docs" / name).read_text())
    lines = [f"`{folder}`: {what}." for folder, what in declared["stand_ins"].items()] + [""]
    for file, text in declared["files"].items():
        lines += [f"`{file}`:", "", *[f"    {line}".rstrip() for line in text.splitlines()], ""]
    lines += ["```sh"]
    for number, step in enumerate(declared["steps"], 1):
        why = [f"#    exit {step['exit']} here: {step['why']}"] if step.get("why") else []
        lines += [f"# {number}. {step['what']}: exit {step['exit']}", *why, step["run"],
                  *[f"#    -> {said}" for said in step["says"]]]
    return "\n".join([*lines, "```"])


def option_text(option: Option) -> str:
    """An option as a user types it: `--gpu auto|require|skip`, `--json`, `NODE.env ...`."""
    shown = option.usage or option.name
    if option.name.startswith("-") and not option.flag and not option.required:
        value = "|".join(option.choices) if option.choices else option.metavar or \
            option.name.lstrip("-").upper()
        shown = f"{option.name} {value}"
    return code(shown)


def commands_table() -> str:
    """Every command of the table: how it is typed, its other options, what it does."""
    rows = ["| command | options | what it does |", "|---|---|---|"]
    for command in COMMAND_TABLE:
        others = [option_text(option) for option in command.options if option.usage is None]
        rows.append(f"| {code(f'{command.name} {command.usage}'.rstrip())} | "
                    f"{', '.join(others)} | {cell(command.help)} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: object) -> str:
    """mkdocs hook: every `{{ FILE.json: KEY }}` replaced by its value, every
    `{{ serve: TAG NODE.env }}` and `{{ up: TAG HOSTS NODE.env ... }}` by the program's
    commands, `{{ commands }}` by the table of commands, `{{ path: FILE.yaml }}` by the
    operator's path it declares and `{{ recipe: TAG ARGS }}` by what `sparkbake recipe TAG
    ARGS` prints."""
    markdown = COMMANDS.sub(lambda _: commands_table(), markdown)
    markdown = STEPS.sub(lambda match: operator_path(match.group(1)), markdown)
    markdown = RECIPE.sub(lambda match: recipe_text(match.group(1)), markdown)
    markdown = SERVE.sub(lambda match: serve_command(match.group(1), match.group(2)), markdown)
    markdown = UP.sub(lambda match: up_commands(match.group(1), match.group(2),
                                                match.group(3).split()), markdown)
    return QUOTE.sub(lambda match: quote(match.group(1), match.group(2)), markdown)


def write_pages(out: Path) -> list[Path]:
    """Both generated pages under OUT (the docs folder); returns their paths."""
    pages = {
        out / "reference" / "preflight-rules.md": preflight_page(json.loads(RULES.read_text())),
        out / "reference" / "benchmarks.md": benchmarks_page(sorted(BENCHMARKS.glob("*.json"))),
    }
    for path, text in pages.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(pages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="the docs folder to write into (default: this one)")
    for path in write_pages(parser.parse_args().out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
