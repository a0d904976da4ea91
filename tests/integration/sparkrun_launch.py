"""Run by sparkrun's own Python in a container (test_sparkrun_serve_cpu.py): the `docker run`
line sparkrun's Docker executor writes to start a recipe's single node, made of
sparkrun's own pieces: the node's command as the recipe's runtime renders it (the flags it
appends included), the recipe's env with its {config.*} and {launch.*} values put in (its env
templates over its config chain, with the given overrides, as `sparkrun run -o` sets them),
and its standard mounts (the Hugging Face cache, and a model given as a folder, mounted at
its own path).

    python sparkrun_launch.py SPEC.json

SPEC: recipe (a file), name (the container's), hf_cache (a host folder), overrides, detach
(sparkrun starts a node detached), executor (its Docker executor's settings). Prints one
line: PREFIX and a JSON object with the line, the node's command, its env, and the readiness
probe sparkrun's launcher runs on the head's host for it (a bash script).
Standard library and sparkrun only; sparkrun is imported by name, so this file type-checks
where sparkrun is absent.
"""

from __future__ import annotations

import importlib
import importlib.resources
import json
import sys
from typing import Any

PREFIX = "sparkrun-launch: "
HOST = "localhost"  # the node: this machine


def launch_line(spec: dict[str, Any]) -> dict[str, Any]:
    bootstrap = importlib.import_module("sparkrun.core.bootstrap")
    v = bootstrap.init_sparkrun()
    recipe = importlib.import_module("sparkrun.core.recipe").Recipe.load(spec["recipe"])
    runtime = bootstrap.get_runtime(recipe.runtime, v)
    overrides = dict(spec["overrides"])
    command = runtime.generate_command(recipe, overrides, is_cluster=False)
    docker = importlib.import_module("sparkrun.orchestration.executors.docker")
    executor = docker.DockerExecutor(docker.DockerExecutor.config_class(**spec["executor"]))
    primitives = importlib.import_module("sparkrun.orchestration.primitives")
    volumes = primitives.build_volumes(spec["hf_cache"], extra={
        **runtime.get_extra_volumes(), **primitives.resolved_model_volume(recipe)})
    env = importlib.import_module("sparkrun.core.launch_env").compose_launch_env(
        runtime_common=runtime.get_common_env(), runtime_mode=runtime.get_solo_env(),
        recipe={k: v for k, v in recipe.env.items() if k not in recipe.env_templates},
        templates=template_env(recipe, overrides, volumes, executor, spec["name"]),
        runtime_extra=runtime.get_extra_env())
    line = executor.run_cmd(recipe.container, command, container_name=spec["name"],
                            detach=spec["detach"], env=env, volumes=volumes,
                            extra_opts=list(runtime.get_extra_docker_opts() or []))
    return {"command": command, "env": env, "line": line,
            "probe": readiness_probe(recipe, runtime, overrides, spec["name"])}


def readiness_probe(recipe: Any, runtime: Any, overrides: dict[str, Any], name: str) -> str:
    """The bash script sparkrun's launcher runs on the head's host to wait for the node
    (orchestration/startup.py run_probe): its standalone probe, with the readiness the
    recipe resolves to on its runtime, the head this host."""
    readiness = importlib.import_module("sparkrun.core.readiness")
    settings = readiness.resolve_readiness_settings(recipe=recipe)
    config = {
        "container": name, "address": "127.0.0.1",
        "port": int(recipe.build_config_chain(overrides).get("port")),
        "port_timeout_s": settings.port_timeout_s,
        "health_timeout_s": settings.health_timeout_s, "inference": settings.inference,
        "inference_style": readiness.resolve_inference_style(settings, runtime, recipe=recipe),
        "health_path": runtime.readiness_health_path,
        "inference_timeout_s": settings.inference_timeout_s,
        "prompt": settings.inference_prompt,
        "model": overrides.get("served_model_name") or recipe.effective_served_model_name,
        "api_key": None,
    }
    source = importlib.resources.files("sparkrun.scripts").joinpath("startup_probe.py")
    # run_probe's own lines after the probe's source
    script = source.read_text() + (
        "\nfrom math import inf\ntry:\n    print(json.dumps(observe(" + repr(config)
        + ")))\nexcept ObservationUnavailable as error:\n    print(json.dumps("
        "{'unsupported_observer': str(error)}))\n")
    return "exec python3 - <<'SPARKRUN_STARTUP_PY'\n" + script + "\nSPARKRUN_STARTUP_PY\n"


def template_env(recipe: Any, overrides: dict[str, Any], volumes: dict[str, str],
                 executor: Any, cluster_id: str) -> dict[str, str]:
    """The recipe's {config.*} and {launch.*} values for its one node, HOST, as sparkrun's
    launch plan renders them (the model a folder already on the node)."""
    templates = importlib.import_module("sparkrun.core.env_templates")
    plan = templates.EnvTemplatePlan(recipe.env_templates,
                                     dict(recipe.build_config_chain(overrides)), (HOST,),
                                     cluster_id)
    plan.models[HOST] = templates.PreparedModelPath(str(recipe.model), "")
    rendered: dict[str, str] = plan.render(HOST, volumes, None, executor)
    return rendered


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as handle:
        spec = json.load(handle)
    print(PREFIX + json.dumps(launch_line(spec), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
