"""The Kubernetes manifests: valid for Kubernetes, and each role given only what it needs.

Every object in deploy/kubernetes/ is validated, in strict mode (no unknown field), against the
OpenAPI-derived JSON schemas of the Kubernetes releases below, which ``kubernetes-validate`` ships
inside its wheel: nothing is downloaded when the tests run. What the schemas cannot see is checked
here too: selectors that match their pods, secrets that exist with the keys a workload reads, the
settings' file paths inside the mounted secrets, which role holds which secret, and the Pod
Security Standard that each namespace enforces.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from bot.core.release import VERSION
from bot.service.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"
# The oldest release still given patches by the major clouds' extended support, and the newest
# the validator knows.
VERSIONS = ("1.27", kubernetes_validate.latest_version())
SETTING_NAMES = {f"PARITYBOT_{name.upper()}" for name in Settings.model_fields}
# Read by libraries, not by paritybot's settings: the Docker SDK and the NVIDIA container runtime;
# and the node's name, which the agent's arguments use.
OTHER_ENV = {"DOCKER_HOST", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NODE_NAME"}
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "Job"}
# The volume types the "restricted" Pod Security Standard allows.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def objects() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for _, o in objects() if o["kind"] == kind}


def workloads() -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for _, o in objects() if o["kind"] in WORKLOAD_KINDS}


def pod(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod(workload)["containers"]
    return only


def role(workload: dict[str, Any]) -> str:
    return workload["metadata"]["labels"]["app.kubernetes.io/component"]


def the(component: str) -> dict[str, Any]:
    (found,) = [w for w in workloads().values() if role(w) == component]
    return found


def secrets() -> dict[tuple[str, str], dict[str, str]]:
    """(namespace, name) -> the keys it holds."""
    return {
        (s["metadata"]["namespace"], name): s.get("stringData") or s.get("data") or {}
        for name, s in by_kind("Secret").items()
    }


def secret_ref(env: dict[str, Any]) -> dict[str, str] | None:
    return env.get("valueFrom", {}).get("secretKeyRef")


def secrets_used(workload: dict[str, Any]) -> set[str]:
    names = {v["secret"]["secretName"] for v in pod(workload).get("volumes", []) if "secret" in v}
    for c in pod(workload)["containers"]:
        names |= {e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", []) if secret_ref(e)}
        names |= {e["secretRef"]["name"] for e in c.get("envFrom", []) if "secretRef" in e}
    return names


# --- Kubernetes' own schemas ---------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    checked = []
    for name, obj in objects():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{name}: {obj['kind']} {obj['metadata']['name']}: {where}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(f"{name}: {exc.message}")
        checked.append(obj["kind"])
    assert {"Namespace", "Secret", "Deployment", "Service", "DaemonSet", "Job"} <= set(checked)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: container(d).update(imagePulPolicy="IfNotPresent"), "Additional properties"),
        (lambda d: d["spec"].update(replicas="two"), "is not of type 'integer'"),
        (lambda d: container(d).pop("name"), "'name' is a required property"),
    ],
)
def test_the_validation_refuses_what_kubernetes_would_refuse(change: Any, message: str) -> None:
    broken = copy.deepcopy(by_kind("Deployment")["paritybot-serve"])
    change(broken)
    with pytest.raises(kubernetes_validate.ValidationError, match=re.escape(message)):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


# --- what the schemas cannot see -----------------------------------------------------------------


def test_selectors_match_the_pods_they_select() -> None:
    for name, w in workloads().items():
        labels = w["spec"]["template"]["metadata"]["labels"]
        wanted = w["spec"].get("selector", {}).get("matchLabels", {})
        assert wanted.items() <= labels.items(), name
    serve_labels = the("serve")["spec"]["template"]["metadata"]["labels"]
    assert by_kind("Service")["paritybot-serve"]["spec"]["selector"].items() <= serve_labels.items()
    pdb = by_kind("PodDisruptionBudget")["paritybot-serve"]["spec"]["selector"]["matchLabels"]
    assert pdb.items() <= serve_labels.items()


def test_each_workload_runs_its_roles_command_from_this_release() -> None:
    args = {role(w): container(w)["args"] for w in workloads().values()}
    assert args["serve"] == ["serve"]
    assert args["db-upgrade"] == ["db", "upgrade"]
    assert args["agent"][:2] == ["agent", "--labels"] and args["agent"][2]
    # Kubernetes leaves a $(VAR) it cannot resolve as it is: each must be in the container's env.
    for w in workloads().values():
        defined = {e["name"] for e in container(w)["env"]}
        assert set(re.findall(r"\$\((\w+)\)", " ".join(container(w)["args"]))) <= defined
    for name, w in workloads().items():
        assert container(w)["image"] == f"paritybot:{VERSION}", name


def test_only_serve_holds_the_apps_key_and_webhook_secret() -> None:
    used = {role(w): secrets_used(w) for w in workloads().values()}
    assert used == {
        "serve": {"paritybot-app", "paritybot-db-owner"},
        "db-upgrade": {"paritybot-db-owner"},
        "agent": {"paritybot-db-agent"},
    }
    # A namespace apart: nothing scheduled beside the agents can be given the App's secret.
    app_namespace = by_kind("Secret")["paritybot-app"]["metadata"]["namespace"]
    assert the("agent")["metadata"]["namespace"] != app_namespace
    agent_env = {e["name"] for e in container(the("agent"))["env"]}
    assert not agent_env & {"PARITYBOT_APP_ID", "PARITYBOT_PRIVATE_KEY_PATH", "PARITYBOT_WEBHOOK_SECRET_FILE"}


def test_every_secret_a_workload_reads_exists_with_its_keys() -> None:
    held = secrets()
    for name, w in workloads().items():
        ns = w["metadata"]["namespace"]
        for volume in pod(w).get("volumes", []):
            if "secret" in volume:
                keys = held[(ns, volume["secret"]["secretName"])]
                assert {i["key"] for i in volume["secret"].get("items", [])} <= keys.keys(), name
        for e in container(w).get("env", []):
            if ref := secret_ref(e):
                assert ref["key"] in held[(ns, ref["name"])], f"{name}: {e['name']}"


def test_workloads_name_only_real_settings() -> None:
    for name, w in workloads().items():
        env = {e["name"] for e in container(w)["env"]}
        unknown = env - SETTING_NAMES - OTHER_ENV
        assert not unknown, f"{name}: {sorted(unknown)}"


def mounted_files(workload: dict[str, Any], tmp_path: Path, values: dict[str, str]) -> dict[str, str]:
    """The workload's environment, its secret files written under tmp_path as the kubelet would.

    ``values`` fills each secret key (``secret/key``); keys not named keep the value secrets.yaml
    gives them.
    """
    ns = workload["metadata"]["namespace"]
    held = secrets()
    volumes = {v["name"]: v["secret"] for v in pod(workload)["volumes"] if "secret" in v}
    moved: dict[str, Path] = {}
    for mount in container(workload)["volumeMounts"]:
        if mount["name"] not in volumes:
            continue
        secret = volumes[mount["name"]]
        keys = held[(ns, secret["secretName"])]
        paths = {i["key"]: i["path"] for i in secret.get("items", [])} or {k: k for k in keys}
        target = tmp_path / mount["mountPath"].strip("/")
        target.mkdir(parents=True)
        for key, path in paths.items():
            (target / path).write_text(values.get(f"{secret['secretName']}/{key}", keys[key]))
        moved[mount["mountPath"]] = target
    env: dict[str, str] = {}
    for e in container(workload)["env"]:
        if ref := secret_ref(e):
            env[e["name"]] = values.get(f"{ref['name']}/{ref['key']}", held[(ns, ref["name"])][ref["key"]])
            continue
        if "valueFrom" in e:  # the pod's own fields (the node's name): not a setting
            continue
        value = e["value"]
        for mount_path, target in moved.items():
            if value.startswith(mount_path + "/"):
                value = str(target / value.removeprefix(mount_path + "/"))
                assert Path(value).is_file(), f"{e['name']}: no such file in the mounted secret"
        env[e["name"]] = value
    return env


def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in SETTING_NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_settings()


@pytest.mark.parametrize("component", ["serve", "agent", "db-upgrade"])
def test_the_secrets_as_shipped_make_each_workload_refuse_to_start(
    component: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = mounted_files(the(component), tmp_path, {})
    with pytest.raises(
        SettingsError, match=r"^PARITYBOT_(APP_ID|DATABASE_PASSWORD_FILE|WEBHOOK_SECRET_FILE)"
    ):
        settings_from(env, monkeypatch).require_serving()


def test_filled_secrets_reach_serve_through_the_settings_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
    values = {
        "paritybot-app/app-id": "123456",
        "paritybot-app/private-key.pem": pem,
        "paritybot-app/webhook-secret": "0123456789abcdef\n",
        "paritybot-db-owner/password": "owner-pass\n",
    }
    settings = settings_from(mounted_files(the("serve"), tmp_path, values), monkeypatch)
    assert settings.app_id == 123456
    assert settings.private_key_text() == pem
    assert settings.webhook_secret is not None
    assert settings.webhook_secret.get_secret_value() == "0123456789abcdef"
    assert settings.database_url.startswith("postgresql://paritybot:owner-pass@")


@pytest.mark.parametrize("component", ["agent", "db-upgrade"])
def test_filled_secrets_give_the_other_roles_their_database_role(
    component: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"paritybot-db-agent/password": "agent-pass", "paritybot-db-owner/password": "owner-pass"}
    settings = settings_from(mounted_files(the(component), tmp_path, values), monkeypatch)
    expected = {"agent": "paritybot_agent:agent-pass@", "db-upgrade": "paritybot:owner-pass@"}[component]
    assert settings.database_url.startswith(f"postgresql://{expected}")
    assert settings.webhook_secret is None and settings.app_id is None


def test_no_pod_gets_a_kubernetes_api_token() -> None:
    for name, w in workloads().items():
        assert pod(w)["automountServiceAccountToken"] is False, name
    for name, account in by_kind("ServiceAccount").items():
        assert account["automountServiceAccountToken"] is False, name


def test_pods_meet_the_pod_security_standard_their_namespace_enforces() -> None:
    levels = {
        name: ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for name, ns in by_kind("Namespace").items()
    }
    for name, w in workloads().items():
        spec, ctx = pod(w), container(w)["securityContext"]
        # Every pod, privileged namespace or not: non-root, no privilege, no capability.
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] != 0, name
        assert ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"]["drop"] == ["ALL"], name
        assert ctx["readOnlyRootFilesystem"] is True, name
        assert not ctx.get("privileged") and not spec.get("hostNetwork") and not spec.get("hostPID"), name
        kinds = {k for v in spec.get("volumes", []) for k in v if k != "name"}
        if levels[w["metadata"]["namespace"]] == "restricted":
            assert kinds <= RESTRICTED_VOLUMES, f"{name}: {kinds - RESTRICTED_VOLUMES}"
            assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        else:
            assert role(w) == "agent", f"{name} needs no privileged namespace"
            assert kinds - RESTRICTED_VOLUMES == {"hostPath"}


def test_agents_run_on_their_gpu_nodes_with_the_nvidia_runtime_and_the_nodes_engine() -> None:
    agent = the("agent")
    spec = pod(agent)
    assert spec["runtimeClassName"] == "nvidia"
    pool = spec["nodeSelector"]
    assert pool and pool.items() <= agent["spec"]["template"]["metadata"]["labels"].items()
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    # GPUs are not requested from Kubernetes: runs get them from the engine, not the scheduler.
    limits = container(agent).get("resources", {}).get("limits", {})
    assert "nvidia.com/gpu" not in limits
    (socket,) = [v for v in spec["volumes"] if "hostPath" in v]
    assert socket["hostPath"] == {"path": "/var/run/docker.sock", "type": "Socket"}
    env = {e["name"]: e.get("value") for e in container(agent)["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container(agent)["volumeMounts"]}
    assert env["DOCKER_HOST"] == f"unix://{mounts[socket['name']]}"
    assert spec["securityContext"]["supplementalGroups"], "the socket's group"


def test_serve_is_probed_and_served_on_the_services_port() -> None:
    serve = container(the("serve"))
    (port,) = serve["ports"]
    assert port["containerPort"] == Settings.model_fields["port"].default
    for probe in ("readinessProbe", "livenessProbe"):
        assert serve[probe]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    (service_port,) = by_kind("Service")["paritybot-serve"]["spec"]["ports"]
    assert service_port["targetPort"] == port["name"]


def test_every_role_reaches_the_same_database() -> None:
    where = {
        role(w): re.sub(r"^postgresql://[^@]+@", "", e["value"])
        for w in workloads().values()
        for e in container(w)["env"]
        if e["name"] == "PARITYBOT_DATABASE_URL"
    }
    assert len(where) == 3 and len(set(where.values())) == 1, where
