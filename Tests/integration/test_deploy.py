"""Deployment files (deploy/): the systemd unit verifies, the Kubernetes manifests are
well-formed with the probes and drain settings the gateway expects, the config they
ship is valid for `quickway check`, and the Prometheus config scrapes /metrics."""
import os
import re
import shutil
import subprocess

import pytest
import yaml

from harness import ROOT, quickway_binary

DEPLOY = os.path.join(ROOT, "deploy")


def test_systemd_unit(tmp_path):
    text = open(os.path.join(DEPLOY, "quickway.service")).read()
    for directive in ("NoNewPrivileges=yes", "User=quickway", "ProtectSystem=strict", "LimitNOFILE=",
                      "ExecReload=/bin/kill -HUP $MAINPID", "KillSignal=SIGTERM"):
        assert directive in text, directive
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    unit = tmp_path / "quickway.service"
    unit.write_text(text.replace("/usr/local/bin/quickway", quickway_binary()))
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "quickway.service" not in out.stderr, out.stderr


def test_kubernetes_manifests_and_their_config(tmp_path):
    docs = list(yaml.safe_load_all(open(os.path.join(DEPLOY, "kubernetes", "quickway.yaml"))))
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "Deployment", "Secret", "Service", "Service"]
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"]
    dep = next(d for d in docs if d["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "admin"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 8080, "admin": 9901}
    assert pod["terminationGracePeriodSeconds"] > 30, "longer than the default drain_timeout"
    assert dep["spec"]["selector"]["matchLabels"] == dep["spec"]["template"]["metadata"]["labels"]
    secret = next(d for d in docs if d["kind"] == "Secret")
    cfg = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(cfg)
    env = {**os.environ, **secret["stringData"]}
    out = subprocess.run([quickway_binary(), "check", "--config", str(path)], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 0, out.stderr
    for var in secret["stringData"]:
        assert f"secret_env: {var}" in cfg or f"password_env: {var}" in cfg
    assert "redis:" in cfg, "the replicas share their nonces and cache"


def test_prometheus_and_dockerfile():
    prom = yaml.safe_load(open(os.path.join(DEPLOY, "prometheus.yml")))
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert jobs["quickway"]["metrics_path"] == "/metrics"
    docker = open(os.path.join(DEPLOY, "Dockerfile")).read()
    assert len(re.findall(r"^FROM ", docker, re.M)) == 2, "multi-stage"
    assert "COPY --from=build" in docker and "USER quickway" in docker
    assert 'ENTRYPOINT ["/usr/local/bin/quickway"]' in docker
