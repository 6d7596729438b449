"""Every thread started through ``threading`` shows its Python name to the OS (Linux's comm), not its
creator's: the etcd client's threads, started from one of ours, must not read as ours."""

from __future__ import annotations

import sys
import threading

import pytest

from shardcron.runtime.thread_names import name_os_threads

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names live in Linux's /proc")


def os_name(thread: threading.Thread) -> str:
    with open(f"/proc/self/task/{thread.native_id}/comm") as f:
        return f.read().strip()


@pytest.fixture
def named_threads():
    name_os_threads()
    yield
    threading.setprofile(None)  # type: ignore[arg-type,unused-ignore]  # None takes the hook out, as documented


def run_and_report(name: str, body) -> dict:
    seen: dict = {}
    done = threading.Event()

    def target():
        body(seen)
        seen[name] = os_name(threading.current_thread())
        done.set()

    threading.Thread(target=target, name=name, daemon=True).start()
    assert done.wait(10)
    return seen


def test_a_thread_shows_its_own_name_and_so_does_one_it_starts(named_threads):
    def start_child(seen: dict) -> None:
        inner = run_and_report("library-child", lambda _seen: None)
        seen.update(inner)

    seen = run_and_report("coordinator", start_child)
    assert seen == {"coordinator": "coordinator", "library-child": "library-child"}


def test_a_long_name_is_cut_to_what_the_kernel_keeps(named_threads):
    seen = run_and_report("a-rather-long-thread-name", lambda _seen: None)
    assert seen == {"a-rather-long-thread-name": "a-rather-long-t"}


def test_the_hook_removes_itself_after_naming(named_threads):
    seen = run_and_report("profiled", lambda s: s.setdefault("profile", sys.getprofile()))
    assert seen["profile"] is None
