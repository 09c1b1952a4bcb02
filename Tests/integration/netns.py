"""Gateway hosts in Linux network namespaces, for tests that cut one host off the network.

`Network` makes, in the root namespace, one bridge per LAN ("redis", "service", ...) and,
for each host, a namespace joined to every LAN by a veth pair: the root end is a port of
the LAN's bridge, the other end lives in the host's namespace. Every address is on
127.0.0.0/8 (the project's rule for test traffic): LAN k is 127.77.<o+k>.0/24, the
bridge holds .1 (servers in the root namespace bind there: Redis, backends) and host i
holds .<10+i>. Two kernel details make 127/8 work off the loopback device:

- `net.ipv4.conf.<dev>.route_localnet=1` on each bridge and on each namespace end (and
  `all` inside the namespaces): without it the kernel drops 127/8 packets that arrive
  on, or would leave by, a device other than `lo` as martians (ARP too).
- A route for the LAN's /24 in the `local` table, on both sides: the `local` table's
  `local 127.0.0.0/8 dev lo` would otherwise send a neighbour's 127.77 address to this
  namespace's own loopback whenever the local and main tables are looked up separately
  (they are merged, longest prefix first, only while no policy rule exists).

`cut(host, lan)` sets the root end of that host's veth down. Nothing tells either side:
the host's end loses its carrier, keeps its route and drops what it sends; the bridge
drops what is sent to it. Its TCP connections neither fail nor answer (sends succeed,
replies never come, a new connect hangs): a silent partition, noticed only by a timeout.
`heal` sets it up again: held connections resume by retransmission, as after a real
partition. Only that one host and LAN are affected.

Names carry the test process's pid (namespaces `qw<pid><host>`, bridges `qw<pid>br<lan>`,
veth root ends `qw<pid><host><lan>`), and `delete()` removes every link, route and
namespace it made, in a `finally`. Needs CAP_NET_ADMIN (root): `Network.permitted()` says
whether `ip netns add` works here, for a skip with the reason.
"""
import os
import shutil
import subprocess


def ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def sysctl_in(ns, name, value):
    """Writes a per-namespace sysctl (`/proc/sys/net` follows the writer's namespace)."""
    prefix = ["ip", "netns", "exec", ns] if ns else []
    subprocess.run([*prefix, "sh", "-c", f"echo {value} > /proc/sys/{name.replace('.', '/')}"], check=True, timeout=10)


class Lan:
    """A bridge in the root namespace: 127.77.<octet>.0/24, the bridge at .1."""

    def __init__(self, name, octet):
        self.name, self.octet = name, octet
        self.address = f"127.77.{octet}.1"
        self.prefix = f"127.77.{octet}.0/24"

    def host_address(self, index):
        return f"127.77.{self.octet}.{10 + index}"


class Host:
    """One namespace joined to each LAN; `prefix` runs a command inside it."""

    def __init__(self, ns, index, lans):
        self.ns, self.index = ns, index
        self.prefix = ["ip", "netns", "exec", ns]
        self.addresses = {lan: l.host_address(index) for lan, l in lans.items()}
        self.root_ends = {}

    def address(self, lan):
        return self.addresses[lan]


class Network:
    def __init__(self, lans, hosts):
        """`lans`: names ("redis", "service"); `hosts`: one-letter tags ("a", "b")."""
        self.tag = f"qw{os.getpid()}"
        self.bridges, self.hosts, self.namespaces = [], {}, []
        base = self._free_octet(len(lans))
        self.lans = {name: Lan(name, base + k) for k, name in enumerate(lans)}
        try:
            for name, lan in self.lans.items():
                br = f"{self.tag}br{name[0]}"
                ip("link", "add", br, "type", "bridge")
                self.bridges.append(br)
                lan.bridge = br
                ip("addr", "add", f"{lan.address}/24", "dev", br)
                sysctl_in(None, f"net.ipv4.conf.{br}.route_localnet", 1)
                ip("link", "set", br, "up")
                ip("route", "replace", lan.prefix, "dev", br, "src", lan.address, "table", "local")
            for i, h in enumerate(hosts):
                ns = f"{self.tag}{h}"
                ip("netns", "add", ns)
                self.namespaces.append(ns)
                host = self.hosts[h] = Host(ns, i, self.lans)
                ip("-n", ns, "link", "set", "lo", "up")
                sysctl_in(ns, "net.ipv4.conf.all.route_localnet", 1)
                for name, lan in self.lans.items():
                    end, inner = f"{ns}{name[0]}", f"{name}0"
                    ip("link", "add", end, "type", "veth", "peer", "name", inner, "netns", ns)
                    host.root_ends[name] = end
                    ip("link", "set", end, "master", lan.bridge, "up")
                    sysctl_in(ns, f"net.ipv4.conf.{inner}.route_localnet", 1)
                    ip("-n", ns, "addr", "add", f"{host.address(name)}/24", "dev", inner)
                    ip("-n", ns, "link", "set", inner, "up")
                    ip("-n", ns, "route", "replace", lan.prefix, "dev", inner, "src", host.address(name), "table", "local")
        except BaseException:
            self.delete()
            raise

    @staticmethod
    def permitted():
        """None if namespaces can be made here, else why not (for a skip)."""
        if shutil.which("ip") is None:
            raise RuntimeError("the `ip` command is missing: apt-get install iproute2 (.ci/run does)")
        probe = f"qw{os.getpid()}probe"
        r = ip("netns", "add", probe, check=False)
        if r.returncode != 0:
            return f"`ip netns add` is not permitted here (needs root or CAP_NET_ADMIN): {r.stderr.strip()}"
        ip("netns", "del", probe)
        return None

    @staticmethod
    def _free_octet(n):
        """A run of `n` third octets under 127.77 that no address in this namespace uses."""
        used = ip("-o", "-4", "addr", "show").stdout
        start = 20 + (os.getpid() % 100) * 2
        for k in range(0, 230, n):
            o = 20 + (start - 20 + k) % 230
            if o + n <= 250 and all(f"127.77.{o + j}." not in used for j in range(n)):
                return o
        raise RuntimeError("no free 127.77.x.0/24 for the test network")

    def cut(self, host, lan):
        ip("link", "set", self.hosts[host].root_ends[lan], "down")

    def heal(self, host, lan):
        ip("link", "set", self.hosts[host].root_ends[lan], "up")

    def delete(self):
        """Removes everything made (each step even if an earlier one failed)."""
        errors = []
        for h in self.hosts.values():
            for end in h.root_ends.values():
                r = ip("link", "del", end, check=False)   # takes its namespace end too
                if r.returncode != 0:
                    errors.append(r.stderr.strip())
        for ns in self.namespaces:
            r = ip("netns", "del", ns, check=False)
            if r.returncode != 0:
                errors.append(r.stderr.strip())
        for br in self.bridges:
            r = ip("link", "del", br, check=False)       # its address and local route go with it
            if r.returncode != 0:
                errors.append(r.stderr.strip())
        self.hosts, self.namespaces, self.bridges = {}, [], []
        if errors:
            raise RuntimeError("network teardown: " + "; ".join(errors))
