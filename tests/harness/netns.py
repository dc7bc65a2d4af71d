"""Real network partitions: network namespaces on a bridge, faults made with nftables inside them.

``Topology(names)`` creates, for each name, a network namespace ``<prefix>-<name>`` holding one end of a veth
pair with an address of its own in a /24 of 10.77.0.0/16 picked free; the other ends join a bridge
``<prefix>b`` in the ROOT namespace, which has the subnet's ``.1``. So every namespace reaches every other one
over the bridge, and the test process (in the root namespace) reaches each namespace's address directly: the
clients of a test (producers, consumers, raw requests) run in the test process, and their path to a namespace
goes through the bridge. ``prefix`` is ``tlns`` + the creating process's PID (6 hex digits) + 2 random hex digits,
unique per topology and short enough for interface names (15 characters); ``close()`` removes this topology's
namespaces, veths and bridge, and a new topology first removes those of topologies whose creating process is gone
(``sweep_stale()``: a run killed before its cleanup), never another live process's.

``wrap(name, argv)`` is argv run inside a namespace (``ip netns exec NS ...``, which execs: the PID is the
process's own, so it is stopped by PID as before). Each namespace has loopback up; its processes listen on its
address (``address(name)``).

Faults live in one nftables table per namespace (``inet tlfault``), so ``heal()`` is ``nft delete table`` in
each. Every fault drops packets at the IP level, by address:

- ``cut(a, b)``: nothing between ``a`` and ``b`` either way (rules in ``a`` only);
- ``cut_one_way(src, dst)``: packets from ``src`` to ``dst`` are dropped (in ``src``'s output). TCP needs both
  ways, so a connection either side opened stalls too (its acknowledgements are lost); what survives is only
  the traffic that needs no answer, which TCP has none of. It is still a distinct fault from ``cut``: ``dst``
  keeps receiving nothing while ``src`` keeps receiving ``dst``'s retransmissions, SYNs, and so on;
- ``isolate(a)``: ``a`` reaches nobody and nobody reaches it, the test process included;
- ``loss(a, percent)``: each packet in or out of ``a`` dropped with that probability (``numgen random``);
- ``clients_cut(a)``: ``a`` cut from the test process (the bridge address) only.

Latency, ``delay(one_way_ms)``: this kernel has no netem qdisc, so it is made in user space. Every namespace gets a
delay line (tests/harness/delay_line.py, transparent) on its address and port ``DELAY_PORT``, and a nat table
``inet tldelay`` whose output chain sends each TCP connection to another namespace's address there (``dnat``); the
delay line connects on to the original address with the socket mark ``DELAY_MARK``, which the rule leaves alone,
and delays each direction by ``one_way_ms``: a round trip between namespaces costs twice that, as netem's delay on
every namespace's interface would. Only TCP between namespaces is delayed (not the test process's clients). The
fault table's filter chains run after the nat chain (priority -10 against -100), so cuts and losses still apply,
now to the delay line's own connections. ``heal()`` leaves the delay on; it lasts until ``close()``.

Not covered: bandwidth (no tbf either), reordering, duplication.
Requires root, ``ip`` and ``nft`` (``available()`` says why not).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

STEM = "tlns"
TABLE = "tlfault"
SUBNETS = ipaddress.ip_network("10.77.0.0/16")
DELAY_TABLE = "tldelay"
DELAY_PORT = 7999
DELAY_MARK = 0x7D1
ROOT = Path(__file__).resolve().parents[2]


class NetnsError(Exception):
    pass


def run(*argv: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, input=input, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def available() -> str | None:
    """None when namespaces and nftables can be used here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2 nftables)"
    name = f"{STEM}probe{uuid.uuid4().hex[:6]}"
    try:
        run("ip", "netns", "add", name)
        run("ip", "netns", "exec", name, "nft", "add", "table", "inet", TABLE)
    except NetnsError as e:
        return str(e)
    finally:
        run("ip", "netns", "del", name, check=False)
    return None


def sweep(stem: str = STEM) -> list[str]:
    """Remove every namespace and root-namespace link whose name starts with ``stem`` (a crashed run's);
    returns what was removed."""
    removed = []
    for line in run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(stem):
            run("ip", "netns", "del", name, check=False)
            removed.append(name)
    for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            link = parts[1].strip().split("@")[0]
            if link.startswith(stem):
                run("ip", "link", "del", link, check=False)
                removed.append(link)
    return removed


def _creator(name: str) -> int | None:
    try:
        return int(name[len(STEM):len(STEM) + 6], 16)
    except ValueError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Remove the namespaces and links of topologies whose creating process no longer runs."""
    names = [line.split()[0] for line in run("ip", "netns", "list", check=False).stdout.splitlines() if line.split()]
    names += [line.split(":")[1].strip().split("@")[0]
              for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines() if ":" in line]
    stale = {n[:len(STEM) + 8] for n in names if n.startswith(STEM) and (pid := _creator(n)) is not None
             and not _alive(pid)}
    return [x for prefix in sorted(stale) for x in sweep(prefix)]


def _free_subnet() -> ipaddress.IPv4Network:
    used = run("ip", "-o", "-4", "addr", "show", check=False).stdout
    for _ in range(100):
        net = list(SUBNETS.subnets(new_prefix=24))[int.from_bytes(os.urandom(1), "big")]
        if f"{net.network_address + 1}/" not in used:
            return net
    raise NetnsError("no free /24 in 10.77.0.0/16")


class Topology:
    def __init__(self, names: list[str]):
        sweep_stale()
        self.prefix = f"{STEM}{os.getpid():06x}{uuid.uuid4().hex[:2]}"
        self.bridge = f"{self.prefix}b"
        self.subnet = _free_subnet()
        self.gateway = str(self.subnet.network_address + 1)  # the bridge's: the test process's address
        self.names = list(names)
        self._addresses = {n: str(self.subnet.network_address + 10 + i) for i, n in enumerate(self.names)}
        self.faults: list[str] = []
        self.delay_ms = 0.0
        self._delay_lines: list[subprocess.Popen] = []
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def namespace(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def address(self, name: str) -> str:
        return self._addresses[name]

    def _create(self) -> None:
        run("ip", "link", "add", self.bridge, "type", "bridge")
        for _ in range(20):  # another run may have picked the same /24 at the same moment: both pick again
            run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            if run("ip", "-o", "-4", "addr", "show", check=False).stdout.count(f" {self.gateway}/24 ") == 1:
                break
            run("ip", "addr", "del", f"{self.gateway}/24", "dev", self.bridge, check=False)
            self.subnet = _free_subnet()
            self.gateway = str(self.subnet.network_address + 1)
            self._addresses = {n: str(self.subnet.network_address + 10 + i) for i, n in enumerate(self.names)}
        else:
            raise NetnsError("no /24 of 10.77.0.0/16 to myself")
        run("ip", "link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            ns, outer = self.namespace(name), f"{self.prefix}v{i}"
            run("ip", "netns", "add", ns)
            run("ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
            run("ip", "link", "set", outer, "master", self.bridge)
            run("ip", "link", "set", outer, "up")
            run("ip", "-n", ns, "addr", "add", f"{self.address(name)}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")

    def close(self) -> None:
        """Remove this topology's namespaces (their veths go with them) and bridge; safe to call twice."""
        for proc in self._delay_lines:
            proc.kill()
            proc.wait()
        self._delay_lines.clear()
        for name in self.names:
            run("ip", "netns", "del", self.namespace(name), check=False)
        sweep(self.prefix)

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wrap(self, name: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(name), *argv]

    def delay(self, one_way_ms: float) -> None:
        """Every TCP connection between namespaces (opened from now on) delayed by ``one_way_ms`` each way (see the
        module doc); called once, before the servers start."""
        assert not self._delay_lines and one_way_ms > 0
        for name in self.names:
            own = self.address(name)
            argv = [sys.executable, "-m", "tests.harness.delay_line", "--transparent", "--listen", own,
                    "--port", str(DELAY_PORT), "--mark", hex(DELAY_MARK), "--one-way-ms", str(one_way_ms)]
            proc = subprocess.Popen(self.wrap(name, argv), cwd=ROOT, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            self._delay_lines.append(proc)
            if "listening" not in (proc.stdout.readline() if proc.stdout else ""):
                raise NetnsError(f"the delay line in {name} did not start")
            rule = (f"ip daddr {self.subnet} ip daddr != {{ {own}, {self.gateway} }} meta l4proto tcp "
                    f"meta mark != {DELAY_MARK:#x} dnat ip to {own}:{DELAY_PORT}")
            script = [f"table inet {DELAY_TABLE} {{",
                      "  chain output { type nat hook output priority -100; policy accept; }", "}",
                      f"add rule inet {DELAY_TABLE} output {rule}"]
            run("ip", "netns", "exec", self.namespace(name), "nft", "-f", "-", input="\n".join(script) + "\n")
        self.delay_ms = one_way_ms

    # ------------------------------------------------------------------------------------------- faults

    def _rules(self, name: str, rules: list[str], label: str) -> None:
        """Add ``rules`` (each "input ..." or "output ...") to the fault table of namespace ``name``."""
        ns = self.namespace(name)
        script = [f"table inet {TABLE} {{",
                  "  chain input { type filter hook input priority -10; policy accept; }",
                  "  chain output { type filter hook output priority -10; policy accept; }", "}"]
        script += [f"add rule inet {TABLE} {r}" for r in rules]
        run("ip", "netns", "exec", ns, "nft", "-f", "-", input="\n".join(script) + "\n")
        self.faults.append(label)

    def cut(self, a: str, b: str) -> None:
        """No packet between ``a`` and ``b``, either way."""
        ip = self.address(b)
        self._rules(a, [f"output ip daddr {ip} drop", f"input ip saddr {ip} drop"], f"cut {a} {b}")

    def cut_one_way(self, src: str, dst: str) -> None:
        """Packets from ``src`` to ``dst`` dropped (``dst`` to ``src`` still delivered)."""
        self._rules(src, [f"output ip daddr {self.address(dst)} drop"], f"cut-one-way {src}->{dst}")

    def isolate(self, a: str) -> None:
        """``a`` cut from everyone, the test process too (its loopback still works)."""
        self._rules(a, ['output oifname != "lo" drop', 'input iifname != "lo" drop'], f"isolate {a}")

    def clients_cut(self, a: str) -> None:
        """``a`` cut from the test process (the bridge's address) only."""
        self._rules(a, [f"output ip daddr {self.gateway} drop", f"input ip saddr {self.gateway} drop"],
                    f"clients-cut {a}")

    def loss(self, a: str, percent: int) -> None:
        """Each packet into or out of ``a`` (not its loopback) dropped with probability ``percent``/100."""
        assert 0 < percent <= 100
        odds = "" if percent == 100 else f"numgen random mod 100 < {percent} "
        self._rules(a, [f'output oifname != "lo" {odds}drop', f'input iifname != "lo" {odds}drop'],
                    f"loss {a} {percent}%")

    def heal(self) -> None:
        """Every fault gone: the fault table of every namespace deleted."""
        for name in self.names:
            with contextlib.suppress(NetnsError):
                run("ip", "netns", "exec", self.namespace(name), "nft", "delete", "table", "inet", TABLE,
                    check=False)
        self.faults.clear()

    def rules(self, name: str) -> str:
        """The namespace's ruleset as nft lists it (for a report)."""
        return run("ip", "netns", "exec", self.namespace(name), "nft", "list", "ruleset", check=False).stdout
