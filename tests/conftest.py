"""Shared fixtures: real etcd servers and real databases, never mocks."""

pytest_plugins = ["tests.support.databases", "tests.support.etcd", "tests.support.clusters"]
