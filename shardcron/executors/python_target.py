"""What a python job may call: its target ``package.module:qualname`` resolved under ``--allow-python``.

A prefix admits the code its modules *define*, not whatever they import:
``myapp`` may well ``import os``, and ``myapp:os.system`` must still not run a
shell. So every rule below is checked on the object found, never on its name
alone:

- The module, before the colon, is under a prefix on dotted boundaries
  (``myapp`` covers ``myapp.jobs``, not ``myappx``), and only then imported.
- No name after the colon starts with ``_``. The dunders (``__builtins__``,
  ``__globals__``, ``__wrapped__``, ``__class__``, ``__init__``, ``__call__``)
  are the ways out of a module's own code into the interpreter's, and a
  leading ``_`` marks a name its module does not offer. Refusing every one,
  not a list of known dunders, also closes the ways nobody has thought of;
  the cost is that a job function needs a public name.
- After the colon the walk passes through classes only, each defined under a
  prefix: never through a module (``myapp:os.system``; a submodule is named
  before the colon, ``myapp.sub:func``) nor through a function's attributes.
- The object found is a plain Python function (a ``def`` or a ``lambda``) or
  a function in a class's namespace: a method, a staticmethod, or a
  classmethod (bound to the class named). Not a builtin, not a class (calling
  one runs its constructor, ``subprocess.Popen``'s for one), not a
  ``functools.partial`` nor any other callable object: their behaviour is
  not code of the allowed modules.
- The function's ``__module__``, and for a method its defining class's, is
  under a prefix. ``from os import spawnl`` in ``myapp`` does not make
  ``myapp:spawnl`` a function of myapp; a function of ``myapp.sub`` that
  ``myapp`` re-exports is one.

Attributes of classes are read from the namespaces (``__dict__``) along the
class's MRO, as ``inspect.getattr_static`` does but without the metaclass, so
no descriptor, property or metaclass hook runs while a target is resolved;
staticmethod and classmethod are unwrapped here. The module's own attribute
is read with ``getattr``: a module-level ``__getattr__`` (PEP 562) of the
allowed module may run, being that module's code, and its answer is checked
like any other.

``__module__`` is the module a function's ``def`` ran in, unless code copied
another one onto it (``functools.wraps``). A wrapper that a library's
decorator made around a function of the allowed module therefore passes: the
allowed module's own code made it, and decorated job functions are common. A
callable object wearing a copied ``__module__`` does not: the type is checked
first.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable, Sequence
from typing import Any

from shardcron.errors import ShardcronError
from shardcron.spec.executors import python_module_allowed

_MAX_ERROR_CHARS = 1000


class TargetRefused(ShardcronError):
    """A python job's target that is not called; the message names the target and what is wrong with it."""


def check_target(target: str, prefixes: Sequence[str]) -> str | None:
    """Why ``target`` may not be called under ``prefixes`` (one line naming it), or None when it may.

    Imports the target's module when a prefix covers it: admission does this
    on purpose, since every node must be able to import it anyway."""
    try:
        resolve_target(target, prefixes)
    except TargetRefused as e:
        return str(e)
    return None


def resolve_target(target: str, prefixes: Sequence[str]) -> Callable[..., Any]:
    """The function ``target`` names, by the rules in the module's docstring; else ``TargetRefused``."""
    prefixes = tuple(prefixes)
    module_name, names = _parse(target)
    if not python_module_allowed(module_name, prefixes):
        raise TargetRefused(
            f"{target} is refused: module {module_name!r} is not under the --allow-python "
            f"prefixes ({_listed(prefixes)})"
        )
    private = next((n for n in names if n.startswith("_")), None)
    if private is not None:
        raise TargetRefused(
            f"{target} is refused: {private!r} starts with '_': a target names only public "
            "attributes (private and special names lead out of the module's own code)"
        )
    obj = _module_attribute(target, _import(target, module_name), names[0])
    cls: type | None = None  # the class the last name was looked up on
    defining: type | None = None  # the class in its MRO whose namespace holds it
    for i, name in enumerate(names):
        walked = ".".join(names[: i + 1])
        if i > 0:
            cls = obj
            obj, defining = _class_attribute(target, cls, name, walked)
        if inspect.ismodule(obj):
            raise TargetRefused(
                f"{target} is refused: {walked!r} is a module ({obj.__name__}): after the colon a "
                "target walks through classes only; name a module before the colon, as "
                "package.module:function"
            )
        if i < len(names) - 1:
            _check_passable(target, obj, walked, prefixes)
    return _callable(target, obj, walked, cls, defining, prefixes)


def _parse(target: str) -> tuple[str, list[str]]:
    module_name, colon, path = target.partition(":")
    if not colon or not module_name or not path:
        raise TargetRefused(f"invalid target {target!r}: expected package.module:function")
    for part in (*module_name.split("."), *path.split(".")):
        if not part.isidentifier():
            raise TargetRefused(
                f"invalid target {target!r}: {part!r} is not a Python name (expected package.module:function)"
            )
    return module_name, path.split(".")


def _import(target: str, module_name: str) -> types.ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - an import runs the module's code: any failure is the job's
        raise TargetRefused(f"cannot import {module_name} for {target}: {type(e).__name__}: {one_line(e)}") from None


def _module_attribute(target: str, module: types.ModuleType, name: str) -> Any:
    try:
        return getattr(module, name)
    except AttributeError:
        raise TargetRefused(f"{target}: {module.__name__} has no attribute {name!r}") from None
    except Exception as e:  # noqa: BLE001 - a module __getattr__ is the module's own code
        raise TargetRefused(
            f"{target}: looking up {name!r} in {module.__name__} raised {type(e).__name__}: {one_line(e)}"
        ) from None


def _class_attribute(target: str, cls: type, name: str, walked: str) -> tuple[Any, type]:
    """The raw value of ``name`` in the first namespace along ``cls``'s MRO that holds it, and that class."""
    for klass in cls.__mro__:
        namespace = klass.__dict__
        if name in namespace:
            return namespace[name], klass
    raise TargetRefused(f"{target}: class {cls.__qualname__} has no attribute {walked.rpartition('.')[2]!r}")


def _check_passable(target: str, obj: Any, walked: str, prefixes: tuple[str, ...]) -> None:
    """Between the colon and the function: a class defined under a prefix, nothing else."""
    if not isinstance(obj, type):
        raise TargetRefused(
            f"{target} is refused: {walked!r} is {_kind(obj)}, not a class: after the colon a "
            "target walks through classes only"
        )
    if not _defined_under(obj, prefixes):
        raise TargetRefused(
            f"{target} is refused: class {walked!r} is defined in module "
            f"{getattr(obj, '__module__', None)!r}, not under the --allow-python prefixes "
            f"({_listed(prefixes)})"
        )


def _callable(
    target: str, obj: Any, walked: str, cls: type | None, defining: type | None, prefixes: tuple[str, ...]
) -> Callable[..., Any]:
    """The function to call for the object found at the end of the walk, after every check on it."""
    bind_to: type | None = None
    fn = obj
    if defining is not None and isinstance(obj, staticmethod):
        fn = obj.__func__
    elif defining is not None and isinstance(obj, classmethod):
        fn, bind_to = obj.__func__, cls
    if not callable(fn):
        raise TargetRefused(f"{target} is not callable ({type(fn).__name__})")
    if not inspect.isfunction(fn):
        raise TargetRefused(
            f"{target} is refused: {walked!r} is {_kind(fn)}; a target must be a Python function "
            "or a class's method, defined under the --allow-python prefixes"
        )
    if not _defined_under(fn, prefixes):
        raise TargetRefused(
            f"{target} is refused: {walked!r} is defined in module {fn.__module__!r}, not under "
            f"the --allow-python prefixes ({_listed(prefixes)}): a prefix admits the functions "
            "its modules define, not the ones they import"
        )
    if defining is not None and not _defined_under(defining, prefixes):
        raise TargetRefused(
            f"{target} is refused: {walked!r} comes from class {defining.__qualname__!r} of "
            f"module {getattr(defining, '__module__', None)!r}, not under the --allow-python "
            f"prefixes ({_listed(prefixes)})"
        )
    return types.MethodType(fn, bind_to) if bind_to is not None else fn


def _defined_under(obj: Any, prefixes: tuple[str, ...]) -> bool:
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and python_module_allowed(module, prefixes)


def _kind(obj: Any) -> str:
    """``obj`` described for a refusal: what it is, by its type."""
    if isinstance(obj, type):
        return "a class (calling it runs its constructor)"
    if isinstance(
        obj,
        (
            types.BuiltinFunctionType,
            types.BuiltinMethodType,
            types.WrapperDescriptorType,
            types.MethodWrapperType,
            types.MethodDescriptorType,
            types.ClassMethodDescriptorType,
        ),
    ):
        return f"a built-in ({type(obj).__name__})"
    if isinstance(obj, types.FunctionType):
        return "a function"
    if isinstance(obj, types.MethodType):
        return "a bound method (name it as Class.method)"
    kind = type(obj)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"a {name} object"


def _listed(prefixes: tuple[str, ...]) -> str:
    return ", ".join(prefixes) if prefixes else "none: the node runs without --allow-python"


def one_line(e: BaseException) -> str:
    """An exception's message on one line, cut to a length fit for a tick's error."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 1] + "…"
