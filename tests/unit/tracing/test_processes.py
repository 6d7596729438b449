"""What a process imports and says, run in a process of its own: no OpenTelemetry without OTEL_* settings, one
line naming the extra when they ask for tracing without it, and the guard's verdicts on a traced consumer's trace."""

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# Makes opentelemetry look uninstalled in the child: its import fails as a missing package's does.
BLOCK_OPENTELEMETRY = textwrap.dedent(
    """
    import sys
    class _Uninstalled:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, _Uninstalled())
    """
)


def python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**clean, "PYTHONPATH": ROOT, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_otel_settings_nothing_imports_opentelemetry():
    out = python(
        """
        import os, sys
        import shardcron.node, shardcron.cli, shardcron.consumer, shardcron.api.server
        from shardcron.consumer import TickInfo, Verdict, dedupe
        from shardcron.executors.identity import tick_fields
        from shardcron.model import TickContext
        from shardcron.tracing.setup import tracing_from_env

        assert tracing_from_env(os.environ, "n1") is None

        class Deduper:
            def admit(self, tick): return Verdict.DUPLICATE
            def release(self, tick): pass

        dedupe(Deduper())(lambda: None)(tick=tick_fields(TickContext("j", 1, 1, 1, 0, "n1")))
        print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_otel_settings_without_the_extra_are_one_line_naming_it(tmp_path):
    out = python(
        BLOCK_OPENTELEMETRY
        + textwrap.dedent(
            f"""
            from shardcron.cli import main
            sys.exit(main(["node", "--etcd", "127.0.0.1:1", "--db", "sqlite:///{tmp_path}/s.db", "--node-id", "n1"]))
            """
        ),
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
    )
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if line.startswith("shardcron: error:")]
    assert errors == [
        "shardcron: error: OTEL_EXPORTER_OTLP_ENDPOINT asks for tracing, but the 'otel' extra is missing "
        "(no module 'opentelemetry'): pip install 'shardcron[otel]', or unset OTEL_EXPORTER_OTLP_ENDPOINT"
    ], out.stderr
    assert "Traceback" not in out.stderr


def test_a_traced_consumer_records_each_verdict_on_the_tick_s_trace():
    out = python(
        """
        import json
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from shardcron.consumer import Verdict, dedupe
        from shardcron.executors.identity import tick_fields
        from shardcron.model import TickContext

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)

        class Deduper:
            verdicts = [Verdict.FIRST, Verdict.DUPLICATE, Verdict.STALE_FENCE]
            def admit(self, tick): return self.verdicts.pop(0)
            def release(self, tick): pass

        task = dedupe(Deduper())(lambda: "ran")
        traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        tick = tick_fields(TickContext("j", 1, 1, 7, 0, "n1", (("traceparent", traceparent),)))
        task(tick=dict(tick))
        task(tick=dict(tick))  # outside any span: a span of its own, the leader's child
        with trace.get_tracer("worker").start_as_current_span("task"):
            task(tick=dict(tick))  # inside the worker's span: an event on it
        print(json.dumps([
            {"name": s.name, "trace": f"{s.context.trace_id:032x}",
             "parent": f"{s.parent.span_id:016x}" if s.parent else None,
             "events": [(e.name, e.attributes["shardcron.verdict"]) for e in s.events]}
            for s in exporter.get_finished_spans()
        ]))
        """
    )
    assert out.returncode == 0, out.stderr
    first, duplicate, task = json.loads(out.stdout)
    leader = {"trace": "4bf92f3577b34da6a3ce929d0e0e4736", "parent": "00f067aa0ba902b7"}
    assert first == {"name": "shardcron.dedupe", **leader, "events": [["first", "first"]]}
    assert duplicate == {"name": "shardcron.dedupe", **leader, "events": [["duplicate", "duplicate"]]}
    assert task["name"] == "task" and task["events"] == [["stale fence", "stale-fence"]]
