"""Deployment files (deploy/, scripts/setup.sh) work as written: the systemd unit verifies
and its reload validates the config before signalling; the Docker image's config listens
beyond loopback and is valid; the Kubernetes manifests run the image the Dockerfile
builds, probe /ready and /health, reload on ConfigMap changes through a sidecar (whose
script is run here against a real gateway) and ship valid configs; the Prometheus config
scrapes /metrics; setup.sh fails when the build fails even if an old binary exists."""
import os
import re
import shutil
import stat
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

from harness import ROOT, Backend, Gateway, free_port, quickway_binary, wait_until

DEPLOY = os.path.join(ROOT, "deploy")


def check_config(path, env=None):
    return subprocess.run([quickway_binary(), "check", "--config", str(path)], capture_output=True, text=True,
                          timeout=30, env={**os.environ, **(env or {})})


# systemd

def unit_lines(text, key):
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]


def test_systemd_unit(tmp_path):
    text = open(os.path.join(DEPLOY, "quickway.service")).read()
    for directive in ("NoNewPrivileges=yes", "User=quickway", "ProtectSystem=strict", "LimitNOFILE=",
                      "KillSignal=SIGTERM"):
        assert directive in text, directive
    # `systemctl reload` validates first: systemd runs the ExecReload lines in order and
    # stops at the first failure, so the check must come before the signal.
    reload = unit_lines(text, "ExecReload")
    config = unit_lines(text, "ExecStart")[0].split("--config", 1)[1].strip()
    assert reload == [f"/usr/local/bin/quickway check --config {config}", "/bin/kill -HUP $MAINPID"], reload
    # That first line's command really tells a valid file from an invalid one.
    argv = reload[0].replace("/usr/local/bin/quickway", quickway_binary()).split()
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(open(os.path.join(DEPLOY, "config.docker.yaml")).read())
    bad.write_text(good.read_text().replace("service: backend", "service: no-such-service"))
    assert subprocess.run(argv[:-1] + [str(good)], capture_output=True, timeout=30).returncode == 0
    assert subprocess.run(argv[:-1] + [str(bad)], capture_output=True, timeout=30).returncode != 0
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    unit = tmp_path / "quickway.service"
    unit.write_text(text.replace("/usr/local/bin/quickway", quickway_binary()))
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "quickway.service" not in out.stderr, out.stderr


# Docker

def dockerfile():
    return open(os.path.join(DEPLOY, "Dockerfile")).read()


def documented_tag():
    """The tag of the `docker build ... -t TAG .` command the Dockerfile documents."""
    tags = re.findall(r"^#\s+docker build .*-t (\S+)", dockerfile(), re.M)
    assert len(tags) == 1, tags
    return tags[0]


def test_dockerfile_and_the_config_it_ships(tmp_path):
    docker = dockerfile()
    froms = re.findall(r"^FROM (\S+)", docker, re.M)
    assert len(froms) == 2, "multi-stage"
    for image in froms:   # pinned by an exact tag: a version with a dot, not latest or a bare major
        name, _, tag = image.partition("@")[0].partition(":")
        assert tag and tag != "latest" and re.search(r"\d+\.\d+|\d{8}", tag), image
    # Debian packages are pinned to exact versions.
    for cmd in re.findall(r"apt-get install ([^&]*)", docker):
        pkgs = [w for w in cmd.replace("\\", " ").split() if not w.startswith("-")]
        assert pkgs and all("=" in p for p in pkgs), pkgs
    assert "COPY --from=build" in docker and "USER quickway" in docker
    assert 'ENTRYPOINT ["/usr/local/bin/quickway"]' in docker
    assert "Package.resolve" in docker and "--force-resolved-versions" in docker
    assert re.fullmatch(r"quickway:\d+\.\d+\.\d+", documented_tag())
    # The config the image runs: copied from the repository to the path CMD serves.
    cmd_config = re.search(r'^CMD \[.*"--config", "([^"]+)"\]', docker, re.M).group(1)
    copies = dict((dst, src) for src, dst in re.findall(r"^COPY (?!--)(\S+) (\S+)$", docker, re.M))
    src = os.path.join(ROOT, copies[cmd_config])
    cfg = yaml.safe_load(open(src))
    # 127.0.0.1 inside a container cannot be reached from outside it.
    assert cfg["listen"].startswith("0.0.0.0:"), cfg["listen"]
    assert cfg["admin"]["listen"].startswith("0.0.0.0:"), cfg["admin"]
    assert {int(cfg["listen"].rsplit(":", 1)[1]), int(cfg["admin"]["listen"].rsplit(":", 1)[1])} == \
        {int(p) for p in re.search(r"^EXPOSE (.*)$", docker, re.M).group(1).split()}
    out = check_config(src)
    assert out.returncode == 0, out.stdout + out.stderr


# Kubernetes

def manifests():
    return list(yaml.safe_load_all(open(os.path.join(DEPLOY, "kubernetes", "quickway.yaml"))))


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def named(docs, kind, name):
    return next(d for d in by_kind(docs, kind) if d["metadata"]["name"] == name)


def container(pod, name):
    return next(c for c in pod["containers"] if c["name"] == name)


def reloader_script():
    pod = named(manifests(), "Deployment", "quickway")["spec"]["template"]["spec"]
    c = container(pod, "config-reloader")
    assert c["command"] == ["/bin/sh", "-c"] and len(c["args"]) == 1
    env = {e["name"]: e.get("value") for e in c["env"]}
    return c["args"][0], env


def test_kubernetes_manifests_and_their_configs(tmp_path):
    docs = manifests()
    kinds = {d["kind"] for d in docs}
    assert {"ConfigMap", "Secret", "Deployment", "Service"} <= kinds, kinds
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"]
    secrets = {d["metadata"]["name"]: d["stringData"] for d in by_kind(docs, "Secret")}
    configmaps = {d["metadata"]["name"]: d["data"] for d in by_kind(docs, "ConfigMap")}

    dep = named(docs, "Deployment", "quickway")
    pod = dep["spec"]["template"]["spec"]
    gw = container(pod, "quickway")
    assert gw["image"] == documented_tag(), "the image the Dockerfile's documented build produces"
    assert gw["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "admin"}
    assert gw["livenessProbe"]["httpGet"] == {"path": "/health", "port": "admin"}
    ports = {p["name"]: p["containerPort"] for p in gw["ports"]}
    assert ports == {"http": 8080, "admin": 9901}
    assert pod["terminationGracePeriodSeconds"] > 30, "longer than the default drain_timeout"

    # The reload sidecar: same config volume and path as the gateway, POSTs /reload on
    # the admin port over the pod's loopback.
    rl = container(pod, "config-reloader")
    mounts = lambda c: {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}   # noqa: E731
    assert mounts(rl)["config"] == mounts(gw)["config"]
    script, env = reloader_script()
    assert env["CONFIG_FILE"] == gw["args"][gw["args"].index("--config") + 1]
    assert env["CONFIG_FILE"].startswith(mounts(gw)["config"] + "/")
    url = urllib.parse.urlsplit(env["RELOAD_URL"])
    assert (url.hostname, url.port, url.path) == ("127.0.0.1", ports["admin"], "/reload")
    assert "--post-data" in script and "Origin" not in script and "Authorization: Bearer $QW_ADMIN_TOKEN" in script
    assert "$(" not in script, "Kubernetes reads $(NAME) in args as a variable reference"
    token = next(e for e in rl["env"] if e["name"] == "QW_ADMIN_TOKEN")["valueFrom"]["secretKeyRef"]
    assert token["key"] in secrets[token["name"]]

    # Every Deployment: selector = pod labels; every config it mounts passes `quickway
    # check` with the Secrets it gets.
    checked = set()
    for d in by_kind(docs, "Deployment"):
        assert d["spec"]["selector"]["matchLabels"] == d["spec"]["template"]["metadata"]["labels"]
        p = d["spec"]["template"]["spec"]
        for v in p.get("volumes", []):
            cm = v.get("configMap")
            if not cm or "config.yaml" not in configmaps[cm["name"]]:
                continue
            for c in p["containers"]:
                if v["name"] not in mounts(c) or c["name"] == "config-reloader":
                    continue
                env = {}
                for ref in c.get("envFrom", []):
                    env.update(secrets[ref["secretRef"]["name"]])
                path = tmp_path / f"{d['metadata']['name']}-{c['name']}.yaml"
                path.write_text(configmaps[cm["name"]]["config.yaml"])
                out = check_config(path, env)
                assert out.returncode == 0, out.stdout + out.stderr
                checked.add(d["metadata"]["name"])
    assert "quickway" in checked

    cfg_text = configmaps["quickway-config"]["config.yaml"]
    cfg = yaml.safe_load(cfg_text)
    for var in secrets["quickway-secrets"]:
        assert re.search(rf"_env: {var}\b", cfg_text), f"{var} is used by the config"
    assert cfg["admin"]["listen"] == f"0.0.0.0:{ports['admin']}" and cfg["listen"] == f"0.0.0.0:{ports['http']}"
    # The replicas share nonces and cache through Redis; the Redis it names is a Service
    # here (the minimal one) in the same namespace.
    redis = urllib.parse.urlsplit(cfg["redis"]["url"])
    svc = named(docs, "Service", redis.hostname)
    assert redis.port in [p["port"] for p in svc["spec"]["ports"]]
    assert any(d["spec"]["template"]["metadata"]["labels"] == svc["spec"]["selector"] for d in by_kind(docs, "Deployment"))
    # Every Service selects a Deployment's pods, on a port name that pod declares.
    for s in by_kind(docs, "Service"):
        d = next(d for d in by_kind(docs, "Deployment") if d["spec"]["template"]["metadata"]["labels"] == s["spec"]["selector"])
        names = {p["name"] for c in d["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in s["spec"]["ports"]} <= names, s["metadata"]["name"]


RELOAD_CONFIG = """
listen: 127.0.0.1:{PORT}
workers: 1
admin: { listen: 127.0.0.1:{ADMIN}, token_env: QW_ADMIN_TOKEN }
services:
  api: { host: api.internal, port: BACKEND_PORT, ips: [127.0.0.1] }
routes:
  - { name: r, match: { path_prefix: PREFIX }, service: api }
"""


def status_of(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_config_reloader_sidecar_reloads_the_gateway_on_a_configmap_swap(tmp_path):
    """The sidecar's script, run by busybox as in its image, against the real gateway and a
    config laid out as the kubelet lays out a ConfigMap volume (config.yaml -> ..data/
    config.yaml, ..data -> a timestamped directory, swapped atomically on a change)."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox not installed")
    script, env = reloader_script()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("sh", "wget", "md5sum", "cut", "sleep", "timeout", "grep"):
        os.symlink(busybox, bindir / tool)
    backend = Backend("127.0.0.1", free_port())
    port = backend.server.server_address[1]
    token = "tok-" + os.urandom(6).hex()
    text = RELOAD_CONFIG.replace("BACKEND_PORT", str(port))
    g = Gateway(text.replace("PREFIX", "/old/"), env={"QW_ADMIN_TOKEN": token})
    volume = tmp_path / "volume"
    volume.mkdir()
    generation = [0]

    def publish(content):   # what the kubelet does: write a new directory, swap ..data
        generation[0] += 1
        d = volume / f"..gen_{generation[0]}"
        d.mkdir()
        (d / "config.yaml").write_text(content)
        os.symlink(d.name, volume / "..data_tmp")
        os.replace(volume / "..data_tmp", volume / "..data")

    gateway_text = open(g.config_path).read()
    publish(gateway_text)
    os.symlink("..data/config.yaml", volume / "config.yaml")
    # The gateway's file now leads into the volume (as the mount would).
    os.symlink(volume / "config.yaml", tmp_path / "link.yaml")
    os.replace(tmp_path / "link.yaml", g.config_path)
    out_path = tmp_path / "reloader.log"
    out = open(out_path, "wb")
    proc = subprocess.Popen([str(bindir / "sh"), "-c", script], stdout=out, stderr=subprocess.STDOUT,
                            env={"PATH": str(bindir), "CONFIG_FILE": g.config_path,
                                 "RELOAD_URL": env["RELOAD_URL"].replace("9901", str(g.admin_port)),
                                 "POLL_SECONDS": "0.2", "QW_ADMIN_TOKEN": token})
    log = lambda: out_path.read_text()   # noqa: E731
    try:
        wait_until(lambda: "watching" in log(), timeout=5, what="the sidecar to start")
        assert status_of(g.url("/new/x")) == 404 and status_of(g.url("/old/x")) == 200
        # A ConfigMap change reaches the gateway (the reload needs the bearer token).
        publish(gateway_text.replace("/old/", "/new/"))
        wait_until(lambda: status_of(g.url("/new/x")) == 200, timeout=10, interval=0.1, what="the new route")
        wait_until(lambda: "reloaded" in log(), timeout=5, what="the sidecar's report")
        assert status_of(g.url("/old/x")) == 404
        # An invalid change is refused, reported once (not retried every poll) and the
        # running config kept.
        publish(gateway_text.replace("/old/", "/newer/").replace("service: api", "service: nope"))
        wait_until(lambda: "refused" in log(), timeout=10, interval=0.1, what="the refusal")
        time.sleep(1.0)   # five polls
        assert log().count("refused") == 1, log()
        assert status_of(g.url("/new/x")) == 200
        assert "not reachable" not in log(), log()
    finally:
        proc.kill()
        proc.wait()
        out.close()
        assert g.stop() == 0
        backend.stop()


# Prometheus

def test_prometheus_config():
    prom = yaml.safe_load(open(os.path.join(DEPLOY, "prometheus.yml")))
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert jobs["quickway"]["metrics_path"] == "/metrics"


# scripts/setup.sh

def fake_repo(tmp_path, swift_rc):
    """A copy of scripts/setup.sh in a repo of its own: `swift` and `dpkg` are stubs first
    on PATH (every package "installed", so no apt-get), and .build/release/quickway is an
    old binary left from an earlier build."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "scripts", "setup.sh"), repo / "scripts" / "setup.sh")
    stale = repo / ".build" / "release" / "quickway"
    stale.parent.mkdir(parents=True)
    stale.write_text("#!/bin/sh\necho stale\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stubs = {"swift": f"#!/bin/sh\necho '[1/9] Compiling'\necho 'error: stub build failure' >&2\nexit {swift_rc}\n",
             "dpkg": "#!/bin/sh\nexit 0\n",
             "apt-get": "#!/bin/sh\necho apt-get must not run >&2\nexit 99\n"}
    if swift_rc == 0:
        stubs["swift"] = "#!/bin/sh\necho '[1/9] Compiling'\nexit 0\n"
    for name, body in stubs.items():
        (bindir / name).write_text(body)
    for p in [stale, *bindir.iterdir()]:
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    env.pop("QW_SKIP_BUILD", None)
    return repo, env


def test_setup_fails_when_the_build_fails_despite_an_old_binary(tmp_path):
    repo, env = fake_repo(tmp_path, swift_rc=1)
    out = subprocess.run(["bash", str(repo / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0, out.stdout + out.stderr
    assert "build failed" in out.stderr, out.stderr
    assert "apt-get must not run" not in out.stderr
    # Control: the same repo with a build that succeeds passes.
    repo, env = fake_repo(tmp_path / "ok", swift_rc=0)
    out = subprocess.run(["bash", str(repo / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "built .build/release/quickway" in out.stdout and "[1/9]" not in out.stdout
