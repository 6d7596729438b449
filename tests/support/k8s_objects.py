"""Reading rendered Kubernetes objects (dicts, as YAML loads them): workloads, their pods, their settings."""

from __future__ import annotations

from collections.abc import Iterator


def named(doc: dict) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def find(docs: tuple[dict, ...], kind: str, name: str) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_templates(docs: tuple[dict, ...]) -> Iterator[tuple[str, dict]]:
    """(owner, pod template) of every workload."""
    for doc in docs:
        if doc["kind"] in ("StatefulSet", "Deployment", "DaemonSet", "ReplicaSet", "Job"):
            yield named(doc), doc["spec"]["template"]
        elif doc["kind"] == "CronJob":
            yield named(doc), doc["spec"]["jobTemplate"]["spec"]["template"]
        elif doc["kind"] == "Pod":
            yield named(doc), doc


def containers(pod_spec: dict) -> list[dict]:
    return pod_spec.get("initContainers", []) + pod_spec["containers"]


def container_env(docs: tuple[dict, ...], container: dict) -> dict[str, object]:
    """The container's variables: its ConfigMaps' data (envFrom), then its own env (a value, or its valueFrom)."""
    env: dict[str, object] = {}
    for source in container.get("envFrom", []):
        assert "configMapRef" in source, f"{container['name']}: only ConfigMaps are expected in envFrom: {source}"
        # kustomize has given a generated ConfigMap its hash suffix, in its name and in every reference
        env.update(find(docs, "ConfigMap", source["configMapRef"]["name"]).get("data", {}))
    for var in container.get("env", []):
        env[var["name"]] = var["value"] if "value" in var else var["valueFrom"]
    return env


def field_ref(value: object) -> str | None:
    """The pod field a variable's valueFrom names (``metadata.name``), or None."""
    return value.get("fieldRef", {}).get("fieldPath") if isinstance(value, dict) else None


def port_of(hostport: str) -> int:
    return int(hostport.rpartition(":")[2])


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def secret_refs(docs: tuple[dict, ...]) -> set[tuple[str, str | None]]:
    """(secret, key) of every secret the pods read: a key of an env var, or None for a whole mounted secret
    (with the keys its items name)."""
    refs: set[tuple[str, str | None]] = set()
    for _, template in pod_templates(docs):
        for volume in template["spec"].get("volumes", []):
            if "secret" in volume:
                items = volume["secret"].get("items")
                keys = [i["key"] for i in items] if items else [None]
                refs.update((volume["secret"]["secretName"], k) for k in keys)
        for c in containers(template["spec"]):
            for var in c.get("env", []):
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    refs.add((ref["name"], ref["key"]))
    return refs
