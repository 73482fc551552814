"""The container image runs the native reader: the Dockerfile's steps, reproduced in virtualenvs.

No Docker engine runs here, so the test rebuilds the image's Python environment from what decides it.
The build context is exactly the files ``.dockerignore`` lets through (docker-py's own matcher), so a
file the build needs but the context leaves out fails the build here as it would in Docker. The
Dockerfile is read with BuildKit's parser (``dockerfile``), and every RUN step of both stages runs with
``sh``, the build stage's in a virtualenv on a machine with a compiler, the runtime stage's in a fresh
one, with the wheel directory the runtime stage mounts from the build stage mapped to one temporary
directory. Only system steps (``apt-get``, creating the user) are not run; they are checked as text.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import extras
import pytest

extras.require("deploy")

import dockerfile  # noqa: E402
from docker.utils.build import exclude_paths  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
BASE_IMAGE = "python:3.11-slim"
#: First words of RUN steps that set up the system rather than Python; not reproducible in a venv.
SYSTEM_STEPS = ("apt-get", "groupadd")
#: The only commands a system step may run.
SYSTEM_TOOLS = {"apt-get", "rm", "groupadd", "useradd"}
COMPILERS = ("gcc", "g++", "clang", "build-essential", "python3-dev", "libpython3")
NATIVE = "(native request reader)"


@dataclass
class Stage:
    base: str
    name: str | None
    runs: list[dockerfile.Command] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    copies: list[tuple[str, ...]] = field(default_factory=list)


def stages() -> list[Stage]:
    """The Dockerfile's stages, in order, with their RUN, ENV, WORKDIR and COPY instructions."""
    out: list[Stage] = []
    for c in dockerfile.parse_file(str(DOCKERFILE)):
        if c.cmd == "FROM":
            v = c.value
            out.append(Stage(v[0], v[2] if len(v) == 3 and v[1].lower() == "as" else None))
        elif c.cmd == "RUN":
            out[-1].runs.append(c)
        elif c.cmd == "ENV":
            out[-1].env.update(zip(c.value[::2], c.value[1::2], strict=True))
        elif c.cmd == "WORKDIR":
            out[-1].workdir = c.value[0]
        elif c.cmd == "COPY":
            out[-1].copies.append(c.value)
    return out


def mount(run: dockerfile.Command) -> dict[str, str]:
    """The ``--mount=type=bind,…`` options of a RUN step (empty when it mounts nothing)."""
    for flag in run.flags:
        if flag.startswith("--mount="):
            return dict(kv.split("=", 1) for kv in flag[len("--mount="):].split(","))
    return {}


def is_system_step(run: dockerfile.Command) -> bool:
    return run.value[0].split()[0] in SYSTEM_STEPS


def context_files() -> set[str]:
    """Files of the repository that ``docker build .`` sends as its context."""
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.strip().startswith("#")]
    return {p for p in exclude_paths(str(REPO), patterns) if (REPO / p).is_file()}


def needed_files() -> set[str]:
    """What building the wheel reads: the package, its build files and the scripts the RUN steps call."""
    needed = {"pyproject.toml", "setup.py"}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    needed.add(project["readme"])
    if isinstance(project.get("license"), dict) and "file" in project["license"]:
        needed.add(project["license"]["file"])
    for path in (REPO / "otelloop").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".so", ".pyc"):
            needed.add(path.relative_to(REPO).as_posix())
    for stage in stages():
        for run in stage.runs:
            needed |= {t for t in shlex.split(run.value[0])
                       if "/" in t and not t.startswith("/") and (REPO / t).is_file()}
    return needed


def build_stage() -> Stage:
    named = [s for s in stages() if s.name == "build"]
    assert len(named) == 1, "the Dockerfile needs exactly one stage named build"
    return named[0]


def runtime_stage() -> Stage:
    return stages()[-1]


def wheel_mount() -> dict[str, str]:
    mounts = [m for m in map(mount, runtime_stage().runs) if m]
    assert len(mounts) == 1, "the runtime stage mounts the build stage's wheels in one RUN step"
    return mounts[0]


# ---------------------------------------------------------------------------------------------------
# Static checks: the Dockerfile and .dockerignore


def test_context_holds_every_file_the_build_needs_and_nothing_built_in_place() -> None:
    context = context_files()
    assert needed_files() - context == set()
    assert "setup.py" in context
    assert {"otelloop/_scan.c", "otelloop/_keys.c", "otelloop/_progress.c"} <= context
    # A native reader built in place (setup.py build_ext --inplace) must never reach the image: it was
    # compiled for this machine, and it would hide a build stage that cannot compile.
    assert not [p for p in context if p.endswith((".so", ".pyc")) or "__pycache__" in p]
    assert not [p for p in context if p.split("/")[0] in ("tests", "benchmarks", "helm", ".git", "build")]


def test_build_stage_compiles_and_runtime_stage_installs_wheels_only() -> None:
    build, runtime = build_stage(), runtime_stage()
    assert build.base == runtime.base == BASE_IMAGE, "both stages need the same Python (wheel ABI tag)"
    apt = " ".join(r.value[0] for r in build.runs if r.value[0].startswith("apt-get"))
    assert "gcc" in apt.split() and "libc6-dev" in apt.split()
    assert any("scripts/build_wheel.sh" in r.value[0] for r in build.runs)
    assert "OTELLOOP_REQUIRE_NATIVE=1" in (REPO / "scripts" / "build_wheel.sh").read_text()
    for run in runtime.runs:
        assert not any(c in run.value[0].split() for c in COMPILERS), run.original
    m = wheel_mount()
    assert m["from"] == "build" and m.get("type") == "bind"
    install = next(r.value[0] for r in runtime.runs if mount(r))
    assert "--no-index" in install and "--only-binary=:all:" in install and m["target"] in install
    assert f'otelloop --version | grep -q "{NATIVE}"' in install


def test_system_steps_run_system_tools_only() -> None:
    """The steps the reproduction skips cannot hide a Python install step."""
    for stage in stages():
        for run in stage.runs:
            if is_system_step(run):
                commands = [c.split()[0] for c in run.value[0].split("&&")]
                assert set(commands) <= SYSTEM_TOOLS, run.original


# ---------------------------------------------------------------------------------------------------
# The build, reproduced


def _env(stage: Stage, venv: Path) -> dict[str, str]:
    """The stage's ENV over this process's environment, its Python first on PATH, no repository copy."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(stage.env)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run_stage(stage: Stage, venv: Path, cwd: Path, paths: dict[str, Path]) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = _env(stage, venv)
    for run in stage.runs:
        if is_system_step(run):
            continue
        command = run.value[0]
        for image_path, local in paths.items():
            command = command.replace(image_path, str(local))
        result = subprocess.run(["sh", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=900)
        assert result.returncode == 0, f"{run.original}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def test_image_environment_runs_the_native_reader(tmp_path: Path) -> None:
    assert shutil.which("gcc"), "the build stage's compiler (Debian: apt-get install gcc)"
    build, runtime = build_stage(), runtime_stage()
    context = tmp_path / "context"
    for rel in context_files():
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, context / rel)
    assert build.copies == [(".", ".")], "the build stage copies the context into its WORKDIR"
    wheels = tmp_path / "wheels"
    m = wheel_mount()

    _run_stage(build, tmp_path / "build-venv", context, {m["source"]: wheels})
    assert [w.name for w in wheels.glob("otelloop-*.whl")]
    _run_stage(runtime, tmp_path / "runtime-venv", tmp_path, {m["target"]: wheels})

    venv_bin = tmp_path / "runtime-venv" / "bin"
    env = _env(runtime, tmp_path / "runtime-venv")
    version = subprocess.run([str(venv_bin / "otelloop"), "--version"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60, check=True)
    assert version.stdout.strip() == f"otelloop {_version()} {NATIVE}"
    for module in ("otelloop._scan", "otelloop._keys", "otelloop._progress"):
        where = subprocess.run([str(venv_bin / "python"), "-c", f"import {module} as m; print(m.__file__)"],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True)
        assert Path(where.stdout.strip()).is_relative_to(tmp_path / "runtime-venv"), where.stdout


def _version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.parametrize("required, builds", [(True, False), (False, True)], ids=["required", "optional"])
def test_a_failing_compiler_fails_only_the_build_that_requires_the_native_reader(
        tmp_path: Path, required: bool, builds: bool) -> None:
    """``pip install`` falls back to the pure-Python reader; the image's build (REQUIRE_NATIVE) fails."""
    for rel in ("setup.py", "pyproject.toml", "README.md", "otelloop/_scan.c", "otelloop/_keys.c",
                "otelloop/_progress.c"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, tmp_path / rel)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CC"] = "false"  # a compiler that always fails
    env["OTELLOOP_REQUIRE_NATIVE"] = "1" if required else ""
    result = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "lib",
                             "--build-temp", "tmp"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert (result.returncode == 0) is builds, result.stderr[-2000:]
    assert not [so for name in ("_scan", "_keys", "_progress") for so in (tmp_path / "lib").rglob(f"{name}*.so")]


def test_image_listens_on_every_interface_whatever_serve_command_it_runs() -> None:
    """otelloop's own default is loopback; the image must make the ports reachable through ``-p``."""
    from otelloop.config import load_config

    env = runtime_stage().env
    assert env.get("OTELLOOP_LISTEN_HOST") == "0.0.0.0"
    cfg = load_config(None, {"exporter.endpoint": "grpc://tempo:4317"}, env=env)
    assert (cfg.receiver.grpc.endpoint, cfg.receiver.http.endpoint, cfg.admin.endpoint) == (
        "0.0.0.0:4317", "0.0.0.0:4318", "0.0.0.0:9464")
