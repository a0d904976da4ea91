"""sparkbake preflight: a node's environment checked against the rules in preflight.json.

Standard library only, Python >= 3.10. Baked into the image next to entrypoint.py (which
runs it before exec), and loaded by `sparkbake check-env` on the host, so both apply the
same rules. The rules are data: each names a level, a condition written as a small Python
expression over the variables, a message and the reason the reference deployment gives.
The checks of the mounted model are in model_checks.py, and the backends' names as vLLM
reads them in backend_naming.py, both loaded from beside this file.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import json
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

RULES_FILE = Path(__file__).with_name("preflight.json")
# the sizes the memory budget reads: model_checks.Layout's field -> variable
SIZES = {"max_model_len": "MAX_MODEL_LEN", "max_num_seqs": "MAX_NUM_SEQS",
         "max_num_batched_tokens": "MAX_NUM_BATCHED_TOKENS"}
# vLLM's verdict on each backend per version, GPU arch and model family, as the image's vLLM
# gives it (written by bin/backend_table.py, held to the image by the smoke)
VERDICTS_FILE = "backend-verdicts.json"
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
INT = re.compile(r"[+-]?[0-9]+")
FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
FIELD = re.compile(r"\{([^{}]+)\}")
EXPECTED = {"int": "an integer", "float": "a number", "bool": "one of 1/0/true/false/yes/no/on/off",
            "intlist": "a comma-separated list of integers", "args": "shell-quoted arguments",
            "str": "text"}


@dataclass(frozen=True)
class Finding:
    """One problem found: its rule, level, message, the reason, and the variable it is about."""

    rule: str
    level: str  # error | warning
    message: str
    reason: str
    at: str = ""

    def lines(self, prefix: str) -> str:
        return f"{prefix}{self.level}: {self.message} [{self.rule}]\n  -> {self.reason}"


@dataclass(frozen=True)
class Image:
    """What the checks know of the image: its vLLM version (None: no vLLM, or not known),
    which of the Python modules backends need it has (None: not known), the tag's declared
    capabilities (None: not declared) and the CUDA arch its kernels are for."""

    vllm: str | None = None
    modules: frozenset[str] | None = None  # of the modules backends need, those it has
    capabilities: Mapping[str, Any] | None = None
    cuda_arch: str | None = None  # the GPU its kernels are for (12.1a)


class Unknown(Exception):
    """A value the rule needs is unset or unreadable: the rule does not apply."""


def _sibling(name: str) -> ModuleType:
    """A module of this file's folder (in the image, the files baked beside it)."""
    module_name = f"sparkbake_image_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, RULES_FILE.with_name(
            f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


model_checks = _sibling("model_checks")
backend_naming = _sibling("backend_naming")
host_kernel = _sibling("host_kernel")


def load_rules(path: Path | str = RULES_FILE) -> dict[str, Any]:
    """The rules, with the backend verdicts beside them as `backends.runs` (if there)."""
    with open(path, encoding="utf-8") as handle:
        rules: dict[str, Any] = json.load(handle)
    verdicts = Path(path).with_name(VERDICTS_FILE)
    if verdicts.is_file():
        rules.setdefault("backends", {})["runs"] = json.loads(verdicts.read_text("utf-8"))
    return rules


def convert(kind: str, text: str) -> Any:
    """A variable's text as its type; ValueError when it is not one."""
    if kind == "int" and INT.fullmatch(text):
        return int(text)
    if kind == "float" and FLOAT.fullmatch(text):
        return float(text)
    if kind == "bool" and text.lower() in TRUE + FALSE:
        return text.lower() in TRUE
    if kind == "intlist" and all(INT.fullmatch(p.strip()) for p in text.split(",")):
        return [int(p) for p in text.split(",")]
    if kind == "args":
        return shlex.split(text)
    if kind == "str":
        return text
    raise ValueError(f"not {EXPECTED.get(kind, kind)}")


def typed(spec: Mapping[str, Any], text: str) -> Any:
    """A variable's text as its spec's type, within its range (`min`, `max`, `above`: each
    number of an intlist too), or one of its `words` as it is (IB_GID_INDEX=auto); ValueError
    when it is none of them."""
    if text in spec.get("words", ()):
        return text
    value = convert(spec["type"], text)
    for number in value if isinstance(value, list) else [value]:
        if isinstance(number, (int, float)) and not isinstance(number, bool) \
                and not _in_range(spec, number):
            raise ValueError(f"not {expected(spec)}")
    return value


def _in_range(spec: Mapping[str, Any], number: float) -> bool:
    return (number >= spec.get("min", number) and number <= spec.get("max", number)
            and ("above" not in spec or number > spec["above"]))


def expected(spec: Mapping[str, Any]) -> str:
    """What a variable's value must be: its type, and its range where it has one."""
    bounds = [f"above {spec['above']}"] if "above" in spec else []
    if "min" in spec and "max" in spec:
        bounds.append(f"from {spec['min']} to {spec['max']}")
    elif "min" in spec:
        bounds.append(f"at least {spec['min']}")
    elif "max" in spec:
        bounds.append(f"at most {spec['max']}")
    words = "".join(f" or {word}" for word in spec.get("words", ()))
    return f"{EXPECTED[spec['type']]} {' and '.join(bounds)}".strip() + words


class Context:
    """The environment, typed through the variable table, plus the tag's series and sysctls,
    the image, and the model folder (None: not known) with the GPU's memory (a probe)."""

    def __init__(self, env: Mapping[str, str], rules: Mapping[str, Any],
                 series: Iterable[str] | None, host_root: Path | str,
                 image: Image | None = None, *, model_dir: Path | str | None = None,
                 gpu_memory: Callable[[], int | None] | None = None,
                 free_memory: Callable[[], Any] | None = None,
                 measured: Callable[[str, str], Any] | None = None) -> None:
        self.env = dict(env)
        self.model_dir = None if model_dir is None else Path(model_dir)
        self.gpu_memory = gpu_memory
        self.free_memory = free_memory
        self.measured = measured
        self.memory: Mapping[str, Any] = rules.get("memory", {})
        self._node: Any = None
        self.variables: dict[str, dict[str, Any]] = rules["variables"]
        self.series = None if series is None else tuple(series)
        self.host_root = Path(host_root)  # the node's / (a test's folder): its proc/ is read
        self.proc_sys = self.host_root / "proc" / "sys"
        self.image = image or Image()
        self.backend_names: dict[str, list[str]] | None = (
            rules.get("backends", {}).get("vllm", {}).get(self.image.vllm)
            if self.image.vllm else None)
        self.backend_modules: dict[str, dict[str, str]] = \
            rules.get("backends", {}).get("modules", {})
        self.providers: dict[str, list[str]] = rules.get("backends", {}).get("providers", {})
        self.runs: dict[str, Any] = rules.get("backends", {}).get("runs", {})

    def given(self, name: str) -> bool:
        return self.env.get(name, "") != ""

    def value(self, name: str) -> Any:
        spec = self.variables.get(name, {"type": "str"})
        if not self.given(name):
            if "unset_means" in spec:
                return spec["unset_means"]
            raise Unknown(name)
        try:
            return typed(spec, self.env[name])
        except ValueError as exc:  # reported by the types rule
            raise Unknown(name) from exc

    def has_series(self, name: str) -> bool:
        if self.series is None:
            raise Unknown("series")
        return name in self.series

    def can(self, name: str, *value: Any) -> bool:
        """The tag declares it can (a flag), or can at this value (a list); True where the
        tag declares nothing, so an undeclared tag is not refused."""
        if self.image.capabilities is None:
            return True
        declared: Any = self.image.capabilities.get(name)
        return value[0] in (declared or ()) if value else bool(declared)

    def capability(self, name: str) -> Any:
        """What the tag declares it can run (versions.yaml `capabilities:`)."""
        if self.image.capabilities is None or name not in self.image.capabilities:
            raise Unknown("capabilities")
        return self.image.capabilities[name]

    def because(self, name: str) -> str:
        """Why the tag cannot do more, as it declares; else a pointer to the declaration."""
        if self.image.capabilities is None:
            raise Unknown("capabilities")
        reasons = self.image.capabilities.get("because") or {}
        return str(reasons.get(name) or f"the tag declares {name}: "
                   f"{self.image.capabilities.get(name)!r} (versions.yaml capabilities)")

    def backends(self, kind: str) -> list[str]:
        """The backend names of a kind (attention, moe, linear) the image's vLLM has."""
        if self.backend_names is None or kind not in self.backend_names:
            raise Unknown("backends")
        return list(self.backend_names[kind])

    def verdicts(self, kind: str) -> dict[str, str]:
        """vLLM's verdict on each backend of a kind for the image's GPU and model family:
        "" runs, else why not (backend-verdicts.json, held to the image by the smoke)."""
        model = (self.image.capabilities or {}).get("model")
        runs = self.runs.get(self.image.vllm or "", {}).get(self.image.cuda_arch or "", {})
        if not model or model not in runs:
            raise Unknown("backend verdicts")
        return dict(runs[model].get(kind, {}))

    def node(self) -> Any:
        """The node as the model checks see it (model_checks.Node), made once; Unknown when
        a variable of its layout cannot be read."""
        if self._node is None:
            declared = (self.image.capabilities or {}).get("device_memory_gib")
            self._node = model_checks.Node(
                self._layout(), self.model_dir,
                declared if type(declared) in (int, float) else None,
                self.gpu_memory or model_checks.nvml_total_memory, self.memory,
                self.free_memory or (lambda: None), self.measured)
        return self._node

    def _layout(self) -> Any:
        try:
            args = self.value("SERVE_EXTRA_ARGS")
        except Unknown:
            args = []
        tp_size, utilization = self.value("TP_SIZE"), self.value("GPU_MEMORY_UTILIZATION")
        if tp_size < 1 or not 0 < utilization <= 1:
            raise Unknown("layout")
        return model_checks.Layout(
            tp_size=tp_size, expert_parallel=model_checks.expert_parallel(args),
            dspark=self.value("VLLM_ENABLE_DSPARK"), utilization=utilization,
            moe_backend=backend_naming.normal_backend(
                "moe", self.env.get("MOE_BACKEND") or "auto"),
            linear_backend=backend_naming.normal_backend(
                "linear", self.env.get("LINEAR_BACKEND") or "auto"),
            images_per_prompt=self._images_per_prompt(), nodes=self.value("NNODES"),
            dcp_size=self.value("DCP_SIZE"), pin=self._pin(),
            block_size=_positive(last_option(args, "--block-size")) or 256,
            kv_cache_dtype=last_option(args, "--kv-cache-dtype") or "fp8",
            **{field: self._given_int(name) for field, name in SIZES.items()})

    def _pin(self) -> int | None:
        """The pinned KV pool in bytes: VLLM_CPU_KVCACHE_SPACE (GiB) where given, which vLLM's
        CPU platform puts over kv_cache_memory_bytes (vllm/platforms/cpu.py), else
        KV_CACHE_MEMORY_BYTES; None: the pool is sized by the utilization."""
        space = self.env.get("VLLM_CPU_KVCACHE_SPACE", "")
        if INT.fullmatch(space) and int(space) > 0:
            return int(space) << 30
        return self._given_int("KV_CACHE_MEMORY_BYTES")

    def _images_per_prompt(self) -> int:
        try:
            value = self.value("LIMIT_MM_IMAGES")
        except Unknown:
            return 1  # unreadable: the types rule reports it
        return value if isinstance(value, int) else 1

    def _given_int(self, name: str) -> int | None:
        """A size the budget reads; None when unset (vLLM's default applies) or unreadable
        (the types rule reports it)."""
        try:
            value = self.value(name)
        except Unknown:
            return None
        return value if isinstance(value, int) and value > 0 else None

    def evaluate(self, expression: str) -> Any:
        return _eval(ast.parse(expression, mode="eval").body, self)

    def render(self, template: str, extra: Mapping[str, str] | None = None) -> str:
        """`{NAME}` as the variable's text (or `unset`), `{expr}` as the expression's value."""
        def field(match: re.Match[str]) -> str:
            inner = match.group(1).strip()
            if extra and inner in extra:
                return extra[inner]
            if inner in self.variables:
                return self.env.get(inner) or self._unset(inner)
            try:
                value = self.evaluate(inner)
            except Unknown:
                return "?"
            return ", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        return FIELD.sub(field, template)

    def _unset(self, name: str) -> str:
        if "unset_means" not in self.variables[name]:
            return "unset"
        means = self.variables[name]["unset_means"]
        return f"unset ({'on' if means else 'off'})" if isinstance(means, bool) \
            else f"unset ({means})"


def _call(node: ast.Call, ctx: Context) -> Any:
    name = node.func.id if isinstance(node.func, ast.Name) else ""
    if name in ("given", "has_series", "capability", "because", "backends"):
        if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
            raise ValueError(f"{name}() takes one quoted name")
        return getattr(ctx, name)(str(node.args[0].value))
    if name == "can" and node.args and isinstance(node.args[0], ast.Constant):
        return ctx.can(str(node.args[0].value), *(_eval(a, ctx) for a in node.args[1:2]))
    if name == "max" and len(node.args) == 1:
        return max(_eval(node.args[0], ctx))
    raise ValueError(f"unknown function {ast.unparse(node.func)}")


BINARY: dict[type[ast.AST], Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}


def _eval(node: ast.AST, ctx: Context) -> Any:
    """Evaluate the small expression language of the rules: names, constants, arithmetic,
    comparisons (`in` too), and/or/not, given('X'), has_series('s'), max(LIST),
    can('key'[, value]), capability('key'), because('key'), backends('kind')."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return all(_eval(v, ctx) for v in node.values)  # stops at the first false
    if isinstance(node, ast.BoolOp):
        return any(_eval(v, ctx) for v in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval(node.operand, ctx)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, ctx)
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        return BINARY[type(node.op)](_eval(node.left, ctx), _eval(node.right, ctx))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, ctx)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, ctx)
            if type(op) not in BINARY:
                raise ValueError(f"unsupported comparison: {ast.unparse(node)}")
            if not BINARY[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Name):
        return ctx.value(node.id)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Call):
        return _call(node, ctx)
    raise ValueError(f"unsupported expression: {ast.unparse(node)}")


# --- the checks: each takes the context and its rule, and returns its findings ------------


def check_when(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    try:
        fired = bool(ctx.evaluate(rule["when"]))
    except Unknown:
        return []
    if not fired:
        return []
    return [_finding(rule, ctx.render(rule["message"]), rule.get("at", ""),
                     reason=ctx.render(rule["reason"]))]


def backend_variables(ctx: Context, rule: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(variable, kind, the name as vLLM reads it) for each backend variable that is set."""
    for name, kind in rule["variables"].items():
        if ctx.given(name):
            yield name, kind, backend_naming.normal_backend(kind, ctx.env[name])


def backend_finding(ctx: Context, rule: Mapping[str, Any], name: str, kind: str,
                    extra: Mapping[str, str]) -> Finding:
    """The rule's finding on a backend variable, its message and reason filled in."""
    fields = {"name": name, "value": ctx.env[name], "kind": kind, **extra}
    return _finding(rule, ctx.render(rule["message"], fields), name,
                    reason=ctx.render(rule["reason"], fields))


def check_backends(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    """Each backend variable names a backend of its kind the image's vLLM has."""
    found = []
    for name, kind, value in backend_variables(ctx, rule):
        try:
            known = ctx.backends(kind)
        except Unknown:
            continue
        if value not in known and not (kind == "attention" and value == "AUTO"):
            found.append(backend_finding(ctx, rule, name, kind, {
                "vllm": str(ctx.image.vllm), "known": ", ".join(known)}))
    return found


def check_backend_capability(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    """Each backend variable names a backend vLLM runs on the image's GPU for its model."""
    found = []
    for name, kind, value in backend_variables(ctx, rule):
        try:
            verdicts = ctx.verdicts(kind)
        except Unknown:
            continue
        why = verdicts.get(backend_naming.verdict_name(kind, value))
        if why:  # "" runs; None: a name vLLM does not know, the backends rule's
            found.append(backend_finding(ctx, rule, name, kind, {
                "why": why, "arch": str(ctx.image.cuda_arch),
                "model": str((ctx.image.capabilities or {}).get("model")),
                "runs": ", ".join(n for n, w in verdicts.items() if not w)}))
    return found


def check_backend_verdicts(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    """The image declares its model family, but no verdicts of its vLLM on its GPU were
    written: backend-cannot-run has nothing to hold the backends to, and says nothing."""
    model = (ctx.image.capabilities or {}).get("model")
    given = list(backend_variables(ctx, rule))
    if not model or not ctx.image.vllm or not ctx.image.cuda_arch or not given:
        return []
    try:
        ctx.verdicts(given[0][1])
        return []
    except Unknown:
        fields = {"vllm": str(ctx.image.vllm), "arch": str(ctx.image.cuda_arch),
                  "model": str(model), "names": ", ".join(name for name, _, _ in given)}
        return [_finding(rule, ctx.render(rule["message"], fields), given[0][0],
                         reason=ctx.render(rule["reason"], fields))]


def check_backend_packages(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    """A backend that needs a Python module (vLLM's `b12x` extra) finds it in the image."""
    if ctx.image.modules is None:
        return []
    found = []
    for name, kind, value in backend_variables(ctx, rule):
        module = ctx.backend_modules.get(kind, {}).get(value)
        if module and module not in ctx.image.modules:
            found.append(backend_finding(ctx, rule, name, kind, {
                "package": module,
                "providers": ", ".join(ctx.providers.get(module, [module]))}))
    return found


def canonical(distribution: str) -> str:
    """A distribution name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def backend_modules(rules: Mapping[str, Any]) -> set[str]:
    """Every module a backend of the rules needs."""
    return {module for table in rules.get("backends", {}).get("modules", {}).values()
            for module in table.values()}


def provided_modules(rules: Mapping[str, Any], distributions: Iterable[str]) -> frozenset[str]:
    """The backends' modules these distributions install (a runtime lock's, on the host)."""
    have = {canonical(d) for d in distributions}
    providers = rules.get("backends", {}).get("providers", {})
    return frozenset(module for module in backend_modules(rules)
                     if have & {canonical(d) for d in providers.get(module, [module])})


def check_types(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    found = []
    for name, spec in ctx.variables.items():
        if not ctx.given(name):
            continue
        try:
            typed(spec, ctx.env[name])
        except ValueError:
            extra = {"name": name, "value": shown(ctx.env[name]), "expected": expected(spec)}
            found.append(_finding(rule, ctx.render(rule["message"], extra), name))
    return found


def shown(value: str, most: int = 60) -> str:
    """A value as a message quotes it: its repr, cut short with its length when it is long."""
    return repr(value) if len(value) <= most else f"{value[:most]!r}... ({len(value)} characters)"


def check_lengths(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    """Variables no process can start with: `NAME=VALUE` and its NUL longer than the kernel
    takes for one string of a process's environment (the rule's max_bytes, MAX_ARG_STRLEN)."""
    found = []
    for name in sorted(ctx.env):
        size = len(f"{name}={ctx.env[name]}".encode("utf-8", "surrogateescape")) + 1
        if size > rule["max_bytes"]:
            extra = {"name": name, "size": str(size), "max_bytes": str(rule["max_bytes"])}
            found.append(_finding(rule, ctx.render(rule["message"], extra), name))
    return found


def check_sysctls(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    if not (ctx.proc_sys / "vm").is_dir():
        return [_finding(rule, ctx.render(rule["unreadable"], {"path": str(ctx.proc_sys)}))]
    problems = []
    for name, reference, want in rule["sysctls"]:
        path = ctx.proc_sys.joinpath(*name.split("."))
        try:
            actual = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            problems.append(f"{name} unreadable (reference: {reference})")
            continue
        if want == "min" and actual < reference:
            problems.append(f"{name}={actual} (want >= {reference})")
        elif want == "max" and actual > reference:
            problems.append(f"{name}={actual} (want <= {reference})")
        elif want == "max-nonzero" and not 0 < actual <= reference:
            problems.append(f"{name}={actual} (want 1..{reference})")
    if not problems:
        return []
    return [_finding(rule, ctx.render(rule["message"], {"problems": "; ".join(problems)}))]


def check_kho(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    """The node's kernel shows Kexec HandOver's tell (host_kernel.py): the rule's level with
    more than one node, where NCCL cannot start; its one_node_level on one."""
    tell = host_kernel.kho_tell(ctx.host_root, rule["cma_free_gib"], rule["cma_total_kib"])
    if tell is None:
        return []
    found = _finding(rule, ctx.render(rule["message"], tell), rule.get("at", ""))
    nodes = _positive(ctx.env.get("NNODES")) or 1
    return [found if nodes > 1 else Finding(found.rule, rule["one_node_level"], found.message,
                                            found.reason, found.at)]


def check_typos(ctx: Context, rule: Mapping[str, Any], known: Iterable[str] = ()) -> list[Finding]:
    names = set(ctx.variables) | set(known)
    found = []
    for name in sorted(ctx.env):
        if name in names:
            continue
        close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=rule["cutoff"])
        if close:
            message = ctx.render(rule["message"], {"name": name, "match": close[0]})
            found.append(_finding(rule, message, name))
    return found


def is_worker(env: Mapping[str, str]) -> bool:
    """A node of a multi-node deployment other than the head, rank 0 (values that are not
    integers: not a worker; the types rule reports them)."""
    try:
        nodes, rank = (convert("int", env.get(name) or "0") for name in ("NNODES", "NODE_RANK"))
    except ValueError:
        return False
    return bool(nodes > 1 and rank > 0)


def check_roles(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    """SERVE_EXTRA_ARGS gives a node of the rule's role none of the options it `refuses`."""
    if ("worker" if is_worker(ctx.env) else "head") != rule["role"]:
        return []
    try:
        words = convert("args", ctx.env.get("SERVE_EXTRA_ARGS", ""))
    except ValueError:  # reported by the types rule
        return []
    options = sorted({word.split("=", 1)[0] for word in words} & set(rule["refuses"]))
    if not options:
        return []
    extra = {"options": " ".join(options)}
    return [_finding(rule, ctx.render(rule["message"], extra), "SERVE_EXTRA_ARGS",
                     reason=ctx.render(rule["reason"], extra))]


def _positive(text: str | None) -> int | None:
    return int(text) if text and INT.fullmatch(text) and int(text) > 0 else None


def last_option(args: list[str], name: str) -> str | None:
    """The value of an option's last occurrence in vllm serve arguments (vLLM keeps the
    last), as `--name VALUE` or `--name=VALUE`; None when absent."""
    found = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(f"{name}="):
            found = arg.split("=", 1)[1]
    return found


def check_model(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    """A check of model_checks.py: each problem it finds fills the rule's message and reason.
    A `when` too says which variables let the rule fire (one check, an error and a warning)."""
    try:
        if "when" in rule and not ctx.evaluate(rule["when"]):
            return []
        problems = model_checks.CHECKS[rule["check"]](ctx.node())
    except Unknown:
        return []
    return [_finding(rule, ctx.render(rule["message"], problem), rule.get("at", ""),
                     reason=ctx.render(rule["reason"], problem)) for problem in problems]


def check_cache_folder(ctx: Context, rule: Mapping[str, Any]) -> list[Finding]:
    """MODEL names a Hugging Face cache folder (models--ORG--NAME: snapshots/REV/, refs/main)
    rather than the snapshot in it that holds the model: the snapshot to name instead."""
    folder = ctx.model_dir
    if folder is None or (folder / "config.json").exists() or not (folder / "snapshots").is_dir():
        return []
    revision, which = cache_revision(folder)
    extra = {"folder": str(folder), "which": which,
             "snapshot": f"{ctx.env.get('MODEL', '').rstrip('/')}/snapshots/{revision}"}
    return [_finding(rule, ctx.render(rule["message"], extra), rule.get("at", ""),
                     reason=ctx.render(rule["reason"], extra))]


def cache_revision(folder: Path) -> tuple[str, str]:
    """The snapshot of a Hugging Face cache folder to serve, and why that one."""
    try:
        return (folder / "refs" / "main").read_text(encoding="utf-8").strip(), \
            "the revision refs/main names"
    except OSError:
        pass
    snapshots = sorted(path.name for path in (folder / "snapshots").iterdir() if path.is_dir())
    if len(snapshots) == 1:
        return snapshots[0], "its only snapshot"
    return "REVISION", f"the revision to serve: {', '.join(snapshots) or 'none is there'}"


def _finding(rule: Mapping[str, Any], message: str, at: str = "",
             reason: str | None = None) -> Finding:
    return Finding(rule=rule["id"], level=rule["level"], message=message,
                   reason=rule["reason"] if reason is None else reason, at=at)


CHECKS: dict[str, Callable[[Context, Mapping[str, Any]], list[Finding]]] = {
    "when": check_when, "types": check_types, "lengths": check_lengths, "sysctls": check_sysctls,
    "cache-folder": check_cache_folder,
    "backends": check_backends, "backend-packages": check_backend_packages,
    "roles": check_roles, "backend-capability": check_backend_capability, "kho": check_kho,
    "backend-verdicts": check_backend_verdicts,
    **{kind: check_model for kind in model_checks.CHECKS},
}


def check(env: Mapping[str, str], rules: Mapping[str, Any] | None = None,
          series: Iterable[str] | None = None, host_root: Path | str = "/",
          known: Iterable[str] = (), image: Image | None = None,
          model_dir: Path | str | None = None,
          gpu_memory: Callable[[], int | None] | None = None,
          free_memory: Callable[[], Any] | None = None,
          measured: Callable[[str, str], Any] | None = None) -> list[Finding]:
    """Every finding of every rule, in the rules' order. `series` None: the tag is unknown and
    the rules about it do not apply; `known`: more variable names that are not typos;
    `image`: its vLLM, packages and capabilities (unknown ones: their rules do not apply);
    `model_dir`: the model's folder (None or absent: the model checks do not apply);
    `gpu_memory`: what asks the GPU its memory (default: NVML; None from it: not known);
    `free_memory`: what asks its free memory (a model_checks.Device or None; default: this
    machine's GPU where gpu_memory is not given, for then this machine is the node, else
    not known); `measured`: the non-KV share `up` measured per rank kind (model_checks.Node)."""
    rules = load_rules() if rules is None else rules
    ctx = context(env, rules, series, host_root, image, model_dir, gpu_memory, free_memory,
                  measured)
    found: list[Finding] = []
    for rule in rules["rules"]:
        kind = rule.get("check", "when")
        found += check_typos(ctx, rule, known) if kind == "typos" else CHECKS[kind](ctx, rule)
    return found


def context(env: Mapping[str, str], rules: Mapping[str, Any], series: Iterable[str] | None,
            host_root: Path | str = "/", image: Image | None = None,
            model_dir: Path | str | None = None,
            gpu_memory: Callable[[], int | None] | None = None,
            free_memory: Callable[[], Any] | None = None,
            measured: Callable[[str, str], Any] | None = None) -> Context:
    """The checks' view of a node (check's arguments)."""
    if free_memory is None and gpu_memory is None:
        free_memory = model_checks.gpu_free_memory
    return Context(env, rules, series, host_root, image, model_dir=model_dir,
                   gpu_memory=gpu_memory, free_memory=free_memory, measured=measured)


def memory(ctx: Context) -> list[dict[str, Any]]:
    """The memory figures of each rank kind of the node's layout (model_checks
    .memory_figures); none where the layout or the model's size is not known."""
    try:
        return list(model_checks.memory_figures(ctx.node()))
    except Unknown:
        return []


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == "error"]
