"""A submodule of tests.support.pytargets: its functions are under the same prefix."""

import functools


def shared(ctx):
    return "shared"


def wraps_its_argument(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@wraps_its_argument
def wrapped_here(ctx):
    return "wrapped"
