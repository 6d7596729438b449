"""A package that python job targets are resolved in (``--allow-python tests.support.pytargets``).

It holds functions of its own next to what it imports, as a user's ``myapp``
does: tests/unit/executors/test_python_target.py names each of them, and only its own
functions and methods may be called.
"""

import functools
import os
import subprocess
from os import spawnl, system  # noqa: F401 - imported foreign callables a target must not reach
from os.path import join  # noqa: F401 - a foreign function written in Python

from tests.support.pytargets import sub  # noqa: F401 - a submodule: reached only as pytargets.sub:...
from tests.support.pytargets.sub import shared  # noqa: F401 - re-exported within the prefix
from tests.support.pytargets.sub import wrapped_here as wrapped_by_sub  # noqa: F401

builtin_len = len
partial_system = functools.partial(os.system, "true")
double = lambda ctx, x: x * 2  # noqa: E731 - a lambda defined here is a function of this module
NUMBER = 7


def helper(ctx, *args):
    return {"called": "helper", "args": list(args)}


# A callable object dressed as helper: functools.wraps copies __module__, __name__ and __wrapped__ onto it.
disguised = functools.wraps(helper)(functools.partial(os.system, "true"))


def _private(ctx):
    return "private"


class Jobs:
    def method(ctx):  # called on the class: its first argument is the tick's context
        return "method"

    @staticmethod
    def static(ctx):
        return "static"

    @classmethod
    def klass(cls, ctx):
        return cls.__name__

    @property
    def prop(self):
        return "prop"

    runner = staticmethod(os.system)  # a class attribute that is a foreign builtin
    spawn = spawnl  # a foreign Python function kept in a class's namespace

    class Inner:
        def nested(ctx):
            return "nested"


class Derived(Jobs):
    pass


class Shell(subprocess.Popen):
    """Defined here, but its methods are subprocess's."""


class Caller:
    def __call__(self, ctx):
        return "called"


instance = Caller()


class Settings:
    pass


settings = Settings()
settings.run = os.system  # an instance attribute that is a callable


def __getattr__(name):
    """PEP 562: attributes made up on demand, some of them foreign."""
    if name == "lazy_system":
        return os.system
    if name == "lazy_spawnl":
        return os.spawnl
    if name == "lazy_helper":
        return helper
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
