"""bin/backend_table.py's question to a tag's image: a command run by the image's Python in a
network-less container, its last line the answer. The vLLM table itself needs a vLLM image
(`nox -s backend-table -- TAG`); here, the fixture's."""

from __future__ import annotations

import backend_table
import pytest

from sparkbake.oci import docker_engine
from sparkbake.smoke import checks
from tests.conftest import Project

pytestmark = pytest.mark.docker


def test_a_question_is_answered_by_the_images_python_with_the_checkers_beside_it(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    tag = built_fixture.plan().tag
    asked = ("import os, sys; print('noise'); "
             "print(sys.executable, sorted(os.listdir(os.path.dirname(sys.argv[1]))) != [])")
    answer = backend_table.ask(docker_client, tag.image_ref, tag.platform,
                               ["-c", asked, f"{checks.CHECKER_DIR}/{backend_table.SCRIPT}"])
    assert answer == f"{checks.PYTHON_IN_IMAGE} True"
