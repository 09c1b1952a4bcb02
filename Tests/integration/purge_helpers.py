"""Helpers shared by the tests of purges that are never lost (issue 36): the relay test
(`test_redis_purge_replay.py`) and the network-namespace one (`test_redis_partition_netns.py`).
Every call goes to the gateway's own `host` (127.0.0.1, or its namespace's address)."""
import json
import urllib.request

from harness import http_call, wait_until

HOST = {"Host": "api.example.com"}
# The follower's heartbeat (PurgeFollower.heartbeatMillis) plus the tests' redis.timeout:
# the longest a silent cut can go unnoticed while the local tier still serves.
HEARTBEAT_S, TIMEOUT_S = 1.0, 0.1


def get(g, path):
    return http_call(g, "GET", path, HOST)


def purge(g, body):
    req = urllib.request.Request(f"http://{g.host}:{g.admin_port}/cache/purge", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def purges(g):
    return g.stats()["redis"]["purges"]


def wait_following(g, timeout=10):
    """Until the gateway's Redis links are up and its local tier follows purges; a
    gateway that never gets there is stopped before the error goes up."""
    try:
        wait_until(lambda: g.stats()["redis"]["connected"] and purges(g)["local_tier_serving"],
                   timeout=timeout, what="redis up and purges followed")
    except BaseException:
        g.stop()
        raise
    return g


def warm(a, b, paths):
    """Each path fetched through `a`, then cached in `b`'s local tier (a HIT at `b`)."""
    for p in paths:
        assert get(a, p)[0] == 200
    for p in paths:
        wait_until(lambda: get(b, p)[1]["x-cache"] == "HIT", what=f"{p} cached at B")
        assert get(b, p)[1]["x-cache"] == "HIT"
