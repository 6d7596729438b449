"""Shared fixtures: real etcd servers and real databases, never mocks."""

import os

from hypothesis import settings

pytest_plugins = ["tests.support.databases", "tests.support.etcd", "tests.support.clusters", "tests.support.sinks"]

# Hypothesis profiles: "ci" (the default, `make test`) and "fuzz" (`make fuzz`): 30 times the examples of
# every test that sizes its run with tests.support.fuzz_strategies.fuzz_examples. Choose one with
# HYPOTHESIS_PROFILE=fuzz or pytest's --hypothesis-profile=fuzz.
settings.register_profile("ci", max_examples=100, print_blob=True)
settings.register_profile("fuzz", max_examples=3000, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
