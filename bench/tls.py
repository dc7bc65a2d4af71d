"""Produce and consume over TLS: tierlog against Apache Kafka 4.4, measured with Kafka's own perf tools.

One invocation makes a CA and a broker certificate for 127.0.0.1 (``tests/security/pki.py``, written to
the work folder; no key is committed), then starts both brokers side by side on 127.0.0.1 as
``bench/vs_kafka.py`` does (its ``KafkaBroker``, ``TierlogBroker`` and shared perf-tool JVM), each with a
PLAINTEXT listener (topic creation, Kafka's inter-broker and controller traffic) and an SSL listener with
the same PEM keystore (``ssl.keystore.type=PEM``: the broker's key then its chain, in one file). The
clients trust the CA through a PEM truststore (``security.protocol=SSL``, ``ssl.truststore.type=PEM``,
``ssl.truststore.location=ca.pem``; the certificate names 127.0.0.1, so Kafka's default host name
check stays on).

Each run, for each broker in turn (the first alternating between runs), on a fresh one-partition topic:

- ``produce``: ``ProducerPerformance`` over TLS, ``--records`` records of ``--record-bytes`` (1 KiB) at
  ``--throughput -1``, ``--acks`` (all, the producer's default), producer defaults otherwise
  (linger.ms=5, batch.size=16384, no compression): MB/s;
- ``consume``: ``ConsumerPerformance`` over TLS reading the topic back from the start (a new group):
  MB/s of the fetch phase (``fetch.MB.sec``, without the group join);
- unless ``--no-plaintext``: the same two steps over the PLAINTEXT listener on another fresh topic,
  which shows what TLS costs each broker in the same run.

The page cache is synced before every timed step, each step records the broker process's CPU time
(/proc) as CPU ms per MB and cores busy, and each topic is deleted once read (gigabytes per
invocation otherwise). ``--warmups`` unmeasured full-size passes of every step per broker come first
(Kafka's JIT, its TLS path's too, and the tools' JVM). Every figure is the median over ``--runs`` runs;
``paired`` is the median of each run's own ratio tierlog / Kafka. Prints ONE JSON line; ``--json PATH``
also writes every run there. The work folder (logs, certificates) is deleted at the end.

``--profile DIR`` then samples the tierlog broker with py-spy (blocking mode, 100 Hz) during one more TLS
produce and consume of twice the records each; the collapsed stacks (idle executor threads left out) go to
DIR and their top frames into the JSON. Profiled steps are not part of the figures.

    python bench/tls.py [--runs 5] [--records 200000] [--acks all] [--profile DIR]   # 3 to 7 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_kafka as vs  # noqa: E402 - the brokers and perf tools of the vs_kafka benchmark

ROOT = vs.ROOT
sys.path.insert(0, str(ROOT))
from tests.security.pki import make_pki  # noqa: E402 - certificates made at run time, as the TLS tests make them

# ------------------------------------------------------------------------------------------- brokers


def tls_settings(keystore: Path) -> dict[str, str]:
    """The keystore settings both brokers get, with Kafka's names."""
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}


class TlsKafkaServer(vs.kp.KafkaServer):
    """Kafka 4.4 single-node KRaft with an SSL listener next to its PLAINTEXT one (a free port per start)."""

    def __init__(self, *args, keystore: Path, **kwargs):
        super().__init__(*args, **kwargs)
        self.keystore = keystore
        self.ssl_port: int | None = None

    def properties(self) -> dict[str, str]:
        props = super().properties()
        self.ssl_port = vs.kp.free_port()
        props.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.ssl_port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.ssl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
            **tls_settings(self.keystore),
        })
        return props


class KafkaTls(vs.KafkaBroker):
    def __init__(self, work: Path, keystore: Path):
        self.server = TlsKafkaServer(work / "kafka", keystore=keystore, overrides=vs.COMMON_BROKER_SETTINGS,
                                     jvm_opts=vs.KAFKA_JVM_OPTS)

    @property
    def ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.ssl_port}"


class TierlogTls(vs.TierlogBroker):
    def __init__(self, work: Path, keystore: Path):
        super().__init__(work, overrides={"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                                          "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                                          **tls_settings(keystore)})
        self.ports: dict[str, int] = {}

    def start(self, timeout: float = 60) -> TierlogTls:
        super().start(timeout)  # returns at the first "ready on" line; wait for both listeners' lines
        deadline = time.monotonic() + timeout
        while len(self.ports) < 2:
            for line in self.output.read_text(errors="replace").splitlines():
                if line.startswith(self.READY):
                    name, _, address = line[len(self.READY):].partition("://")
                    self.ports[name] = int(address.rsplit(":", 1)[1])
            if len(self.ports) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tierlog listed only {self.ports}")
                time.sleep(0.05)
        self.port = self.ports["PLAINTEXT"]
        return self

    @property
    def ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports['SSL']}"


# --------------------------------------------------------------------------------------------- steps


def produce(bootstrap: str, topic: str, records: int, record_bytes: int, acks: str, client_config: Path | None):
    extra = ["--producer.config", client_config] if client_config else []
    out = vs.perf_tool("ProducerPerformance", "--topic", topic, "--num-records", records, "--record-size",
                       record_bytes, "--throughput", -1, *extra, "--producer-props", f"bootstrap.servers={bootstrap}",
                       f"acks={acks}", timeout=600)
    return vs.producer_summary(out, records, record_bytes)


def consume(bootstrap: str, topic: str, records: int, client_config: Path | None) -> dict:
    extra = ["--consumer.config", client_config] if client_config else []
    out = vs.perf_tool("ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic, "--messages", records,
                       "--timeout", 60000, "--group", f"perf-{uuid.uuid4().hex[:8]}", *extra, timeout=600)
    return vs.consumer_summary(out, records)


def delete_topic(runner, bootstrap: str, topic: str) -> None:
    runner.run("TopicCommand", "--bootstrap-server", bootstrap, "--delete", "--topic", topic, timeout=60)


def one_pass(broker, runner, args, protocol: str, client_config: Path | None, records: int) -> dict:
    """Produce then consume ``records`` on a fresh topic of ``broker`` over ``protocol``; the topic is deleted."""
    bootstrap = broker.ssl_bootstrap if protocol == "ssl" else broker.bootstrap
    topic = f"{protocol}-{uuid.uuid4().hex[:8]}"
    vs.create_topic(runner, broker.bootstrap, topic)
    try:
        vs.sync()
        p = vs.timed_step(broker, produce, bootstrap, topic, records, args.record_bytes, args.acks, client_config)
        vs.sync()
        c = vs.timed_step(broker, consume, bootstrap, topic, records, client_config)
    finally:
        delete_topic(runner, broker.bootstrap, topic)
    return {"produce": p, "consume": c}


FIGURES = {"produce": ("mb_s", "broker_cpu_ms_per_mb", "broker_cpu_busy", "p99_ms"),
           "consume": ("mb_s", "broker_cpu_ms_per_mb", "broker_cpu_busy", "join_ms")}


def aggregate(runs: list[dict], protocols: list[str]) -> dict:
    medians: dict = {}
    ratios: dict = {}
    paired: dict = {}
    for proto in protocols:
        for step, keys in FIGURES.items():
            for key in keys:
                for name in ("kafka", "tierlog"):
                    values = [r[name][proto][step][key] for r in runs if key in r[name][proto][step]]
                    if values:
                        medians.setdefault(name, {})[f"{proto}_{step}_{key}"] = round(statistics.median(values), 2)
            k, t = medians["kafka"][f"{proto}_{step}_mb_s"], medians["tierlog"][f"{proto}_{step}_mb_s"]
            ratios[f"{proto}_{step}"] = round(t / k, 2)
            paired[f"{proto}_{step}"] = round(statistics.median(
                r["tierlog"][proto][step]["mb_s"] / r["kafka"][proto][step]["mb_s"] for r in runs), 2)
    if "plaintext" in protocols:  # what TLS costs each broker: its TLS MB/s over its plaintext MB/s, paired
        for name in ("kafka", "tierlog"):
            for step in FIGURES:
                medians[name][f"tls_over_plaintext_{step}"] = round(statistics.median(
                    r[name]["ssl"][step]["mb_s"] / r[name]["plaintext"][step]["mb_s"] for r in runs), 2)
    return {"ratios": ratios, "paired": paired, "medians": medians}


def profile(tierlog: TierlogTls, runner, args, client_config: Path, folder: Path) -> dict:
    """One more TLS produce and consume (twice the records) against tierlog, each sampled by py-spy."""
    folder.mkdir(parents=True, exist_ok=True)
    topic = f"prof-{uuid.uuid4().hex[:8]}"
    vs.create_topic(runner, tierlog.bootstrap, topic)
    records = 2 * args.records
    out = {}
    try:
        for phase, step in (("produce", lambda: produce(tierlog.ssl_bootstrap, topic, records, args.record_bytes,
                                                         args.acks, client_config)),
                            ("consume", lambda: consume(tierlog.ssl_bootstrap, topic, records, client_config))):
            path = folder / f"tls_profile_{phase}.txt"
            vs.sync()
            with vs.sampled(tierlog.pid, path):
                r = vs.timed_step(tierlog, step)
            # Idle executor threads (a stack ending in concurrent.futures' _worker, blocked on its queue) are not the
            # broker's work: left out, so the shares are of the event loop's thread and of workers that ran.
            lines = path.read_text(errors="replace").splitlines()
            path.write_text("".join(f"{ln}\n" for ln in lines
                                    if not (ln.rpartition(" ")[0].rsplit(";", 1)[-1].startswith("_worker (")
                                            and "concurrent/futures/thread.py" in ln)))
            summary = vs.summarize_profile(path)
            out[phase] = {"samples": summary["samples"], "self": summary["self"], "inclusive": summary["inclusive"],
                          "mb_s_while_sampled": round(r["mb_s"], 1), "broker_cpu_busy": r["broker_cpu_busy"],
                          "collapsed_stacks": str(path)}
            vs.log(f"profile {phase}: {summary['samples']} samples; top self: "
                   + ", ".join(f"{f} {s}%" for f, s in summary["self"][:5]))
    finally:
        delete_topic(runner, tierlog.bootstrap, topic)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--acks", default="all", choices=("0", "1", "all"))
    ap.add_argument("--warmups", type=int, default=2, help="unmeasured full-size passes per broker first")
    ap.add_argument("--no-plaintext", action="store_true", help="measure TLS only (no plaintext baseline)")
    ap.add_argument("--json", type=Path, help="also write every run's figures there")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="then py-spy the tierlog broker during one more TLS produce and consume; stacks go to DIR")
    args = ap.parse_args()
    missing = vs.kp.missing_prerequisites()
    if missing:
        ap.error("cannot run Apache Kafka: missing " + ", ".join(missing))
    if args.profile and vs.py_spy() is None:
        ap.error("--profile needs py-spy on PATH")
    protocols = ["ssl"] if args.no_plaintext else ["ssl", "plaintext"]
    started = time.monotonic()
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    pki = make_pki(work / "pki")
    client_config = work / "client-ssl.properties"
    client_config.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\n")
    configs = {"ssl": client_config, "plaintext": None}
    brokers = [KafkaTls(work, pki.broker.pem), TierlogTls(work, pki.broker.pem)]
    runner = vs.kp.ToolRunner()  # TopicCommand
    vs.TOOLS = vs.PerfTools()
    runs: list[dict] = []
    result: dict = {}
    try:
        for b in brokers:
            b.start()
            vs.log(f"{b.name}: PLAINTEXT {b.bootstrap}, SSL {b.ssl_bootstrap} (pid {b.pid})")
        for _ in range(args.warmups):  # unmeasured: the JITs (Kafka's TLS path too), __consumer_offsets
            for b in brokers:
                for proto in protocols:
                    one_pass(b, runner, args, proto, configs[proto], args.records)
        vs.log("warm-up done")
        for run in range(args.runs):
            order = brokers if run % 2 == 0 else brokers[::-1]
            res: dict = {b.name: {} for b in brokers}
            for proto in (protocols if run % 2 == 0 else protocols[::-1]):
                for b in order:
                    res[b.name][proto] = one_pass(b, runner, args, proto, configs[proto], args.records)
            runs.append(res)
            vs.log(f"run {run + 1}/{args.runs}: " + "; ".join(
                f"{proto} {step} kafka {res['kafka'][proto][step]['mb_s']:.1f} tierlog "
                f"{res['tierlog'][proto][step]['mb_s']:.1f} MB/s" for proto in protocols for step in FIGURES))
        result = aggregate(runs, protocols)
        if args.profile:
            result["profile"] = profile(brokers[1], runner, args, client_config, args.profile)
    finally:
        runner.close()
        vs.TOOLS.close()
        for b in brokers:
            b.stop()
        shutil.rmtree(work, ignore_errors=True)  # logs and certificates; the disk filled once from leftovers
    line = {"bench": "tls", "date": time.strftime("%Y-%m-%d"), "kafka_version": vs.kp.KAFKA_VERSION,
            "runs": args.runs, "records": args.records, "record_bytes": args.record_bytes, "acks": args.acks,
            "tierlog_event_loop": vs.TierlogBroker.event_loop(),
            "ratios": result["ratios"], "paired": result["paired"], "medians": result["medians"],
            "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "minutes": round((time.monotonic() - started) / 60, 1)}
    if "profile" in result:
        line["profile"] = result["profile"]
    if args.json:
        args.json.write_text(json.dumps({**line, "per_run": runs}, indent=1) + "\n")
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
