"""compose/ stays honest: it parses, and it uses only flags the tested CLI has.

No Docker engine runs here, so nothing is built; `docker-compose config`
validates the file (Debian's docker-compose, installed by `make test`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from shardcron.cli import build_parser
from tests.support.cli_parsers import command_env_names

COMPOSE = Path(__file__).resolve().parents[3] / "compose" / "docker-compose.yml"


def test_docker_compose_config_accepts_the_file():
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is missing: `make test` installs Debian's docker-compose package"
    out = subprocess.run([exe, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_every_node_setting_in_compose_is_a_real_flag():
    spec = yaml.safe_load(COMPOSE.read_text())
    node_variables = command_env_names("node")
    services = {k: v for k, v in spec["services"].items() if k.startswith("node-")}
    assert len(services) == 3
    for name, svc in services.items():
        env = svc["environment"]
        assert env["SHARDCRON_NODE_ID"] == name and env["SHARDCRON_ADVERTISE"] == f"{name}:7070"
        for var in env:
            assert var in node_variables, f"{name}: {var} is not a `shardcron node` flag's variable"
        assert svc["command"] == ["node"]


def test_the_migration_service_runs_a_real_command():
    spec = yaml.safe_load(COMPOSE.read_text())
    cmd = spec["services"]["migrate"]["command"]
    parsed = build_parser().parse_args(cmd + ["--db", "sqlite://"])
    assert callable(parsed.func)
