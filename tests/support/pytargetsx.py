"""Next to tests.support.pytargets, not under it: ``--allow-python tests.support.pytargets`` must not import it."""


def helper(ctx):
    return "pytargetsx"
