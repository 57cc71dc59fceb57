"""Drivers named by text (``--drivers`` / ``AGENTKEEP_DRIVERS``): every
form loads, and every bad spec is one line naming it (exit 2 on the command line)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentkeep.cli import cli
from agentkeep.drivers import Driver
from agentkeep.drivers.loading import DriverLoadError, load_drivers, split_specs
from agentkeep.drivers.process import ProcessDriver

_DRIVERS = """
import agentkeep as ak

class Echo:
    id = "echo-class"

    def run(self, request, context):
        context.emit("echoed", {"n": len(request.history)})
        return DriverResult(metadata={"by": self.id})

instance = Echo()
instance.id = "echo-instance"

def factory():
    made = Echo()
    made.id = "echo-factory"
    return made

driver = Echo()
driver.id = "echo-default"

not_a_driver = 42

def returns_nothing():
    return None

def raises():
    raise RuntimeError("no credentials\\nsecond line")

native = Echo()
native.id = "agentkeep"
"""


@pytest.fixture
def drivers_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_drivers.py"
    path.write_text(textwrap.dedent(_DRIVERS))
    return path


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path holding the module ``ak_test_module_driver`` (a module that is
    itself a driver: module-level ``id`` and ``run``)."""
    folder = tmp_path / "mods"
    folder.mkdir()
    (folder / "ak_test_module_driver.py").write_text(
        "id = 'module-itself'\n\ndef run(request, context):\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    sys.modules.pop("ak_test_module_driver", None)


def test_every_form_loads(drivers_file: Path, module_dir: Path) -> None:
    specs = ",".join(
        [
            f"{drivers_file}:instance",
            f"{drivers_file}:Echo",  # a class: called with no arguments
            f" {drivers_file}:factory ",  # a factory; spaces around an item are dropped
            str(drivers_file),  # its `driver`
            "agentkeep.drivers.process",  # its `driver`
            "ak_test_module_driver",  # a module that is a driver itself
            "",  # an empty item is skipped
        ]
    )
    loaded = load_drivers(specs)
    assert [d.id for d in loaded] == [
        "echo-instance",
        "echo-class",
        "echo-factory",
        "echo-default",
        "process",
        "module-itself",
    ]
    assert all(isinstance(d, Driver) for d in loaded)
    assert isinstance(loaded[4], ProcessDriver)
    assert load_drivers("") == []
    assert split_specs(" a , ,b,") == ["a", "b"]
    assert [d.id for d in load_drivers(["agentkeep.drivers.process:ProcessDriver"])] == ["process"]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("{file}:not_a_driver", "is an int (42), not a driver"),
        ("{file}:returns_nothing", "calling it returned a NoneType (None), not a driver"),
        (
            "{file}:raises",
            "calling it with no arguments raised RuntimeError: no credentials second",
        ),
        ("{file}:missing", 'the file {file} has no attribute "missing"'),
        ("{file}:native", 'its driver uses the reserved id "agentkeep"'),
        ("{file}:instance,{file}:instance", 'the driver id "echo-instance" is given twice'),
        ("{dir}/nope.py", "no such file"),
        ("{dir}", "is a directory, not a Python file"),
        ("no_such_module_xyz", 'no module named "no_such_module_xyz"'),
        ("agentkeep.drivers.nope:driver", 'no module named "agentkeep.drivers.nope"'),
        ("agentkeep.errors", 'the module "agentkeep.errors" has no "driver" attribute'),
    ],
)
def test_a_bad_spec_names_itself_and_what_was_wrong(
    drivers_file: Path, spec: str, problem: str
) -> None:
    spec = spec.format(file=drivers_file, dir=drivers_file.parent)
    problem = problem.format(file=drivers_file)
    with pytest.raises(DriverLoadError) as raised:
        load_drivers(spec)
    message = str(raised.value)
    assert problem in message
    assert "\n" not in message
    assert message.startswith('"')
    assert raised.value.code == "invalid_driver_spec"


def test_a_file_that_raises_on_import_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import json\nraise ValueError('bad\\nconfig')\n")
    with pytest.raises(DriverLoadError) as raised:
        load_drivers(str(path))
    assert str(raised.value) == f'"{path}": loading {path} raised ValueError: bad config'
    assert not [name for name in sys.modules if name.startswith("agentkeep_driver_broken")]


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (
            ["--drivers", "no_such_module_xyz"],
            {},
            'error: --drivers "no_such_module_xyz": no module named "no_such_module_xyz"',
        ),
        (
            [],
            {"AGENTKEEP_DRIVERS": "{file}:not_a_driver"},
            'error: AGENTKEEP_DRIVERS "{file}:not_a_driver": is an int (42), not a driver',
        ),
    ],
)
@pytest.mark.parametrize("command", [["talk", "nobody", "hi"], ["serve", "--port", "0"], ["mcp"]])
def test_a_bad_spec_is_one_line_and_exit_2_for_commands_that_run_turns(
    tmp_path: Path,
    drivers_file: Path,
    args: list[str],
    env: dict[str, str],
    line: str,
    command: list[str],
) -> None:
    home = tmp_path / "home"
    setup = CliRunner().invoke(
        cli, ["--home", str(home), "agent", "create", "-"], input='{"id": "x"}'
    )
    assert setup.exit_code == 0, setup.output
    env = {k: v.format(file=drivers_file) for k, v in env.items()}
    result = CliRunner().invoke(cli, ["--home", str(home), *args, *command], env=env)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(line.format(file=drivers_file)), lines[0]
    assert not (home / "daemon.json").exists()


def test_serve_and_mcp_take_drivers_after_their_name(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for command in (["serve", "--port", "0"], ["mcp"]):
        result = CliRunner().invoke(
            cli, ["--home", str(home), *command, "--drivers", "./missing_driver.py"]
        )
        assert result.exit_code == 2
        assert result.stderr.strip().startswith(
            'error: --drivers "./missing_driver.py": no such file'
        )
        assert not (home / "daemon.token").exists()  # refused before anything was written


def test_a_command_that_only_reads_never_loads_the_drivers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    setup = CliRunner().invoke(
        cli, ["--home", str(home), "agent", "create", "-"], input='{"id": "x"}'
    )
    assert setup.exit_code == 0
    result = CliRunner().invoke(
        cli, ["--home", str(home), "--drivers", "no_such_module_xyz", "agent", "list"]
    )
    assert result.exit_code == 0, result.output


def test_talk_runs_an_injected_driver_given_as_module_attr(
    tmp_path: Path, module_dir: Path
) -> None:
    home = tmp_path / "home"
    definition = '{"id": "mod", "driver": {"id": "module-itself"}}'
    setup = CliRunner().invoke(cli, ["--home", str(home), "agent", "create", "-"], input=definition)
    assert setup.exit_code == 0, setup.output
    result = CliRunner().invoke(
        cli,
        [
            "--home",
            str(home),
            "--json",
            "--drivers",
            "ak_test_module_driver:run",
            "talk",
            "mod",
            "hi",
        ],
    )
    # `:run` names a function: called with no arguments, it fails: the spec is named.
    assert result.exit_code == 2
    result = CliRunner().invoke(
        cli,
        ["--home", str(home), "--json", "--drivers", "ak_test_module_driver", "talk", "mod", "hi"],
    )
    assert result.exit_code == 0, result.output
    assert '"status":"completed"' in result.stdout
