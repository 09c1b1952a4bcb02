"""The unsafe-code check (issue 31, step 5): `scripts/dev/check-unsafe.sh` passes on the
tree as it is, and fails, naming file and line, when one of the four constructs appears
outside the places allowed for it. Each failing case runs the script on a copy of
`Sources/` with one violation written in.

Needs no binary."""
import os
import shutil
import subprocess

import pytest

from harness import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "dev", "check-unsafe.sh")


def run_check(root):
    return subprocess.run(["bash", SCRIPT, root], capture_output=True, text=True, timeout=60)


@pytest.fixture
def tree(tmp_path):
    """A copy of the checkout's Sources/ (all the script reads)."""
    shutil.copytree(os.path.join(ROOT, "Sources"), tmp_path / "Sources")
    return tmp_path


def inject(tree, relpath, line):
    path = tree / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write("\n" + line + "\n")
    with open(path) as f:
        return relpath, sum(1 for _ in f)


def test_real_tree_passes():
    r = run_check(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no unsafe lifetime constructs outside the edges" in r.stdout


def test_the_codecs_and_the_pipeline_are_checked_too(tree):
    # Nothing is exempt by name: a codec or pipeline file is checked like any other.
    for relpath in ("Sources/QuickwayCore/HTTP1/HTTP1Connection.swift", "Sources/QuickwayCore/Pipeline/ProxyContext.swift"):
        rel, lineno = inject(tree, relpath, "let strayRef = Unmanaged<AnyObject>.self")
        r = run_check(str(tree))
        assert r.returncode == 1 and f"{rel}:{lineno}:" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("relpath, line", [
    ("Sources/QuickwayCore/Upstream/UpstreamHTTPCall.swift", "private unowned(unsafe) let stray: AnyObject? = nil"),
    ("Sources/QuickwayCore/Cache/ResponseCache.swift", "let strayRef = Unmanaged<AnyObject>.self"),
    ("Sources/QuickwayCore/Auth/Crypto.swift", "final class Stray { @exclusivity(unchecked) var n = 0 }"),
    ("Sources/QuickwayCore/Pipeline/Stages/NewStage.swift", "func f(_ u: Unmanaged<AnyObject>) { u._withUnsafeGuaranteedRef { _ in } }"),
])
def test_a_violation_fails_with_its_file_and_line(tree, relpath, line):
    relpath, lineno = inject(tree, relpath, line)
    r = run_check(str(tree))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{relpath}:{lineno}:" in r.stdout, r.stdout


@pytest.mark.parametrize("relpath", [
    "Sources/QuickwayCore/Support/Uncounted.swift",
    "Sources/QuickwayCore/EventLoop/LoopTimer.swift",
    "Sources/QuickwayCore/Transport/TCPTransport.swift",
    "Sources/QuickwayCore/Upstream/UpstreamTrampolines.swift",
    "Sources/CQuickwayShims/include/qw_stray.h",
])
def test_the_edges_may_use_them(tree, relpath):
    inject(tree, relpath, "// Unmanaged, unowned(unsafe), _withUnsafeGuaranteedRef, @exclusivity(unchecked)")
    r = run_check(str(tree))
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_folder_named_like_a_c_target_is_not_exempt(tree):
    # The C targets are top-level `Sources/C*/` folders; `QuickwayCore/Cache/` is not one.
    relpath, lineno = inject(tree, "Sources/QuickwayCore/Coalescing/Stray.swift", "let x = Unmanaged<AnyObject>.self")
    r = run_check(str(tree))
    assert r.returncode == 1 and f"{relpath}:{lineno}:" in r.stdout, r.stdout + r.stderr
