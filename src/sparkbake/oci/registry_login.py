"""The login Docker's client keeps for a registry (`docker login HOST`), read from the client
config the run's settings name: a credential helper's answer, else the `auths` entry."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass

from sparkbake.config.settings import Settings
from sparkbake.errors import EngineError

__all__ = ["RegistryLogin", "registry_login"]


@dataclass(frozen=True)
class RegistryLogin:
    """What `docker login HOST` keeps: a user and password, or an identity token (a refresh
    token for the registry's token server)."""

    username: str
    secret: str
    identity_token: bool


def registry_login(host: str, settings: Settings) -> RegistryLogin | None:
    """The login Docker's client would send to host: from its config
    (Settings.docker_config_file): the credential helper of `credHelpers` or `credsStore`,
    else `auths`. None when there is none."""
    import docker.auth  # the SDK's own reading of the client config and its helpers
    import docker.errors

    path = settings.docker_config_file
    try:
        client_config = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise EngineError(f"{path}: not a Docker client config ({exc})",
                          "fix it, or log in again with `docker login`") from exc
    if not isinstance(client_config, dict) or not client_config:
        return None
    registry = "docker.io" if host in ("docker.io", "index.docker.io") else host
    try:
        with warnings.catch_warnings():  # a missing helper: said below, as an error
            warnings.simplefilter("ignore")
            # the helpers run with the run's environment, not this process's
            auth = docker.auth.load_config(config_dict=client_config,
                                           credstore_env=dict(settings.environ))
            found = auth.resolve_authconfig(registry) or {}
    except docker.errors.DockerException as exc:  # a helper that fails or is missing
        raise EngineError(f"the Docker credential helper for {host} failed: "
                          f"{str(exc).splitlines()[0][:200]}",
                          f"check it (`docker login {host}` uses it too)") from exc
    # a helper's answer is capitalized, an `auths` entry lower case (the SDK's two forms)
    entry = {key.lower(): value for key, value in found.items()}
    if entry.get("identitytoken"):
        return RegistryLogin(str(entry.get("username") or ""), str(entry["identitytoken"]), True)
    if entry.get("username") and entry.get("password") is not None:
        return RegistryLogin(str(entry["username"]), str(entry["password"]), False)
    return None
