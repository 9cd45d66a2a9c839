"""The lab's network: one namespace per host, instance and client, all on private addresses that
exist only inside these namespaces.

    client ns (HAProxy, load generator)  10.77.0.1 ─┐
                                                    core ns: bridge br0
    host ns h: bridge hbr ── uplink ────────────────┘   (tbf on "uplink": the host's shared link)
       ├── instance ns i1  10.77.1.x  (web server)
       └── noise ns        10.77.2.x  (iperf3 server of that host's network antagonists)

Everything an instance on host h sends to the client leaves through h's uplink, so its
instances and its network antagonists share one bandwidth-shaped FIFO link, as on a real host.
"""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass, field

from quell.lab.process import run_checked
from quell.lab.tag import PREFIX, RunTag

SUBNET_PREFIX = 16
CLIENT_ADDR = "10.77.0.1"


def instance_addr(index: int) -> str:
    return f"10.77.{1 + index // 250}.{1 + index % 250}"


def noise_addr(host_index: int) -> str:
    return f"10.77.9.{1 + host_index}"


def _ip(*args: str) -> None:
    run_checked(["ip", *args], "network")


def tbf_burst_bytes(rate_mbit: float) -> int:
    """Bucket size: about 1 ms of traffic at the link rate, at least 16 KiB (a few MTUs).

    A small bucket makes a response's time on the link close to size / rate, as on a real
    NIC; a large one would let whole responses through at once and hide the link."""
    return max(16 * 1024, int(rate_mbit * 1e6 / 8 / 1000))


@dataclass
class Topology:
    tag: RunTag
    netns: list[str] = field(default_factory=list)
    host_index: dict[str, int] = field(default_factory=dict)

    @property
    def core(self) -> str:
        return self.tag.name("core")

    @property
    def client(self) -> str:
        return self.tag.name("client")

    def host_ns(self, host: str) -> str:
        return self.tag.name(f"h-{host}")

    def instance_ns(self, instance: str) -> str:
        return self.tag.name(f"i-{instance}")

    def noise_ns(self, host: str) -> str:
        return self.tag.name(f"n-{host}")

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.netns.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _veth(self, ns_a: str, name_a: str, ns_b: str, name_b: str) -> None:
        _ip(
            "link",
            "add",
            name_a,
            "netns",
            ns_a,
            "type",
            "veth",
            "peer",
            "name",
            name_b,
            "netns",
            ns_b,
        )
        _ip("-n", ns_a, "link", "set", "dev", name_a, "up")
        _ip("-n", ns_b, "link", "set", "dev", name_b, "up")

    def _leaf(self, ns: str, bridge_ns: str, bridge: str, port: str, addr: str) -> None:
        """A namespace with one interface ``eth0`` at ``addr``, plugged into a bridge port."""
        self._add_ns(ns)
        self._veth(ns, "eth0", bridge_ns, port)
        _ip("-n", bridge_ns, "link", "set", port, "master", bridge)
        _ip("-n", ns, "addr", "add", f"{addr}/{SUBNET_PREFIX}", "dev", "eth0")

    def create(self) -> None:
        self._add_ns(self.core)
        _ip("-n", self.core, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.core, "link", "set", "br0", "up")
        self._leaf(self.client, self.core, "br0", "c-client", CLIENT_ADDR)

    def add_host(self, host: str, link_mbit: float | None) -> None:
        j = len(self.host_index)
        self.host_index[host] = j
        ns = self.host_ns(host)
        self._add_ns(ns)
        _ip("-n", ns, "link", "add", "hbr", "type", "bridge")
        _ip("-n", ns, "link", "set", "hbr", "up")
        self._veth(ns, "uplink", self.core, f"u-{j}")
        _ip("-n", ns, "link", "set", "dev", "uplink", "master", "hbr")
        _ip("-n", self.core, "link", "set", f"u-{j}", "master", "br0")
        if link_mbit is not None:
            run_checked(
                [
                    "tc",
                    "-n",
                    ns,
                    "qdisc",
                    "add",
                    "dev",
                    "uplink",
                    "root",
                    "tbf",
                    "rate",
                    f"{link_mbit}mbit",
                    "burst",
                    str(tbf_burst_bytes(link_mbit)),
                    "latency",
                    "100ms",
                ],
                "tc",
            )
        self._leaf(self.noise_ns(host), ns, "hbr", "pn", noise_addr(j))

    def add_instance(self, instance: str, host: str, index: int) -> str:
        """Create the instance's namespace on ``host``; returns its address."""
        addr = instance_addr(index)
        self._leaf(self.instance_ns(instance), self.host_ns(host), "hbr", f"p{index}", addr)
        return addr

    def remove_instance(self, instance: str) -> None:
        ns = self.instance_ns(instance)
        delete_netns(ns)
        if ns in self.netns:
            self.netns.remove(ns)

    def destroy(self) -> list[str]:
        """Delete every namespace of the run (their interfaces and tc rules go with them)."""
        errors = []
        for ns in reversed(self.netns):
            try:
                delete_netns(ns)
            except Exception as exc:  # teardown goes on; report at the end
                errors.append(f"netns {ns}: {exc}")
        self.netns.clear()
        return errors


def netns_pids(name: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def delete_netns(name: str) -> None:
    import os
    import signal

    for pid in netns_pids(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    run_checked(["ip", "netns", "delete", name], "network")


def list_netns(prefix: str = PREFIX) -> list[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix)]
