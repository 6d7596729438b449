"""What ``--allow-python`` admits: functions and methods *defined* under a prefix, nothing their modules import.

Every target names something real in ``tests/support/pytargets`` (a package
that imports ``os``, ``subprocess`` and friends, as a user's ``myapp`` does).
"""

from __future__ import annotations

import sys

import pytest

from shardcron.executors.python import PythonExecutor
from shardcron.executors.python_target import TargetRefused, check_target, resolve_target
from shardcron.model import ExecutorKind, ExecutorSpec, PythonSpec, TickContext
from shardcron.runtime.latch import Latch

pytestmark = pytest.mark.timeout(60)

PKG = "tests.support.pytargets"
ALLOW = (PKG,)
CTX = TickContext(job_id="job-t", scheduled_at_ms=1_767_225_605_000, attempt=1, fence=1, shard=0, node_id="n")


@pytest.mark.parametrize(
    ("path", "args", "returned"),
    [
        ("helper", (1, "a"), {"called": "helper", "args": [1, "a"]}),
        ("double", (21,), 42),  # a lambda defined in the package
        ("Jobs.method", (), "method"),
        ("Jobs.static", (), "static"),
        ("Jobs.klass", (), "Jobs"),  # a classmethod, bound to the class named
        ("Derived.klass", (), "Derived"),
        ("Derived.static", (), "static"),  # inherited from a class under the prefix
        ("Jobs.Inner.nested", (), "nested"),
        ("shared", (), "shared"),  # defined in pytargets.sub, re-exported by pytargets
        ("wrapped_by_sub", (), "wrapped"),  # a functools.wraps wrapper, defined under the prefix
        ("lazy_helper", (), {"called": "helper", "args": []}),  # a module __getattr__ answering with one of its own
    ],
)
def test_functions_and_methods_defined_under_the_prefix_are_called(path, args, returned):
    fn = resolve_target(f"{PKG}:{path}", ALLOW)
    assert fn("ctx", *args) == returned
    assert check_target(f"{PKG}:{path}", ALLOW) is None


def test_a_submodule_is_named_before_the_colon():
    assert resolve_target(f"{PKG}.sub:shared", ALLOW)("ctx") == "shared"
    assert resolve_target(f"{PKG}.sub:shared", ("tests.support",))("ctx") == "shared"


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        # the finding: walking from the allowed module into what it imported
        ("os.spawnl", "'os' is a module (os): after the colon a target walks through classes only"),
        ("os.system", "'os' is a module (os)"),
        ("sub.shared", "'sub' is a module (tests.support.pytargets.sub)"),
        ("subprocess.Popen", "'subprocess' is a module"),
        # private and special names
        ("__builtins__", "'__builtins__' starts with '_'"),
        ("helper.__globals__", "'__globals__' starts with '_'"),
        ("disguised.__wrapped__", "'__wrapped__' starts with '_'"),
        ("Jobs.__init__", "'__init__' starts with '_'"),
        ("Jobs.method.__call__", "'__call__' starts with '_'"),
        ("_private", "'_private' starts with '_'"),
        ("__getattr__", "'__getattr__' starts with '_'"),
        # imported, not defined here
        (
            "spawnl",
            "'spawnl' is defined in module 'os', not under the --allow-python prefixes "
            "(tests.support.pytargets): a prefix admits the functions its modules define, not the ones they import",
        ),
        ("join", "'join' is defined in module 'posixpath'"),
        ("lazy_spawnl", "'lazy_spawnl' is defined in module 'os'"),  # a module __getattr__'s answer is checked
        ("Jobs.spawn", "'Jobs.spawn' is defined in module 'os'"),
        # not a plain Python function
        ("system", "'system' is a built-in (builtin_function_or_method)"),
        ("builtin_len", "'builtin_len' is a built-in (builtin_function_or_method)"),
        ("lazy_system", "'lazy_system' is a built-in (builtin_function_or_method)"),
        ("Jobs.runner", "'Jobs.runner' is a built-in (builtin_function_or_method)"),
        ("Jobs", "'Jobs' is a class (calling it runs its constructor)"),
        ("Shell", "'Shell' is a class"),
        ("Jobs.Inner", "'Jobs.Inner' is a class"),
        ("partial_system", "'partial_system' is a functools.partial object"),
        ("disguised", "'disguised' is a functools.partial object"),  # functools.wraps gave it a __module__ of ours
        ("instance", "'instance' is a tests.support.pytargets.Caller object"),
        # walking through something other than a class
        ("settings.run", "'settings' is a tests.support.pytargets.Settings object, not a class"),
        ("instance.ctx", "'instance' is a tests.support.pytargets.Caller object, not a class"),
        ("helper.x", "'helper' is a function, not a class"),
        # a class of ours whose method is subprocess's
        ("Shell.kill", "'Shell.kill' is defined in module 'subprocess'"),
        ("Shell.communicate", "'Shell.communicate' is defined in module 'subprocess'"),
    ],
)
def test_what_the_package_imports_or_is_not_a_function_is_refused(path, rule):
    target = f"{PKG}:{path}"
    with pytest.raises(TargetRefused) as refused:
        resolve_target(target, ALLOW)
    message = str(refused.value)
    assert message.startswith(f"{target} is refused: "), message
    assert rule in message, message
    assert "\n" not in message
    assert check_target(target, ALLOW) == message


@pytest.mark.parametrize(
    ("target", "allow", "message"),
    [
        (
            "os:system",
            ALLOW,
            "os:system is refused: module 'os' is not under the --allow-python prefixes (tests.support.pytargets)",
        ),
        ("tests.support.pytargetsx:helper", ALLOW, "module 'tests.support.pytargetsx' is not under"),
        (
            "tests.support.pytargets:helper",
            ("tests.support.pytarget",),
            "module 'tests.support.pytargets' is not under",
        ),
        ("tests.support.pytargets:helper", (), "prefixes (none: the node runs without --allow-python)"),
        (
            "tests.support.pytargets",
            ALLOW,
            "invalid target 'tests.support.pytargets': expected package.module:function",
        ),
        ("tests.support.pytargets:", ALLOW, "expected package.module:function"),
        (
            "tests.support.pytargets:a..b",
            ALLOW,
            "invalid target 'tests.support.pytargets:a..b': '' is not a Python name",
        ),
        ("tests.support.pytargets:os-x", ALLOW, "'os-x' is not a Python name"),
        (
            "tests.support.pytargets.nosuch:f",
            ALLOW,
            "cannot import tests.support.pytargets.nosuch for tests.support.pytargets.nosuch:f: ModuleNotFoundError",
        ),
        (
            "tests.support.pytargets:nosuch",
            ALLOW,
            "tests.support.pytargets:nosuch: tests.support.pytargets has no attribute 'nosuch'",
        ),
        ("tests.support.pytargets:Jobs.nosuch", ALLOW, "class Jobs has no attribute 'nosuch'"),
        ("tests.support.pytargets:NUMBER", ALLOW, "tests.support.pytargets:NUMBER is not callable (int)"),
        ("tests.support.pytargets:Jobs.prop", ALLOW, "tests.support.pytargets:Jobs.prop is not callable (property)"),
    ],
)
def test_bad_targets_name_what_is_wrong(target, allow, message):
    with pytest.raises(TargetRefused) as refused:
        resolve_target(target, allow)
    assert message in str(refused.value), str(refused.value)


def test_a_module_outside_the_prefixes_is_never_imported():
    sys.modules.pop("tests.support.pytargetsx", None)
    assert check_target("tests.support.pytargetsx:helper", ALLOW) is not None
    assert "tests.support.pytargetsx" not in sys.modules


def test_the_executor_refuses_right_before_the_call_and_runs_nothing(tmp_path):
    """A job that skipped admission (written straight into the store) still cannot spawn a shell."""
    marker = tmp_path / "MARKER"
    spec = ExecutorSpec(
        ExecutorKind.PYTHON,
        python=PythonSpec(target=f"{PKG}:os.spawnl", args=("/bin/sh", "sh", "-c", f"touch {marker}")),
    )
    result = PythonExecutor(None, ALLOW).run(spec, CTX, 10.0, Latch())
    assert not result.ok
    assert result.error == (
        f"{PKG}:os.spawnl is refused: 'os' is a module (os): after the colon a target walks "
        "through classes only; name a module before the colon, as package.module:function"
    )
    assert not marker.exists()
