"""Broker start-up, called by ``tierlog broker`` with a validated configuration.

Until the network server lands, the broker opens the storage engine (recovering it after an
unclean stop), prints what it will serve, runs the storage housekeeping (retention, flushes,
checkpoints) until SIGINT or SIGTERM, and then shuts the storage down cleanly.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

from tierlog.storage import LogConfig, LogManager

log = logging.getLogger(__name__)

HOUSEKEEPING_TICK_S = 1.0


def log_manager_for(cfg: Any) -> LogManager:
    """A LogManager whose partitions take their settings from the broker's topic defaults."""
    default = LogConfig.from_topic_config(cfg.topic_config())
    return LogManager(
        cfg.log_dirs,
        lambda topic: default,
        retention_check_interval_ms=cfg["log.retention.check.interval.ms"],
        checkpoint_interval_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
        producer_id_expiration_ms=cfg["producer.id.expiration.ms"],
    )


def run(cfg: Any) -> int:
    """Start the broker described by ``cfg`` (a :class:`tierlog.config.BrokerConfig`); returns the exit status."""
    logging.getLogger().setLevel(logging.INFO)  # the broker reports start-up and recovery
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    manager = log_manager_for(cfg)
    t0 = time.monotonic()
    manager.startup()
    listeners = ", ".join(str(listener) for listener in cfg.listeners)
    print(f"tierlog broker {cfg['node.id']}: storage ready in {(time.monotonic() - t0) * 1000:.0f} ms, "
          f"{len(manager.logs)} partition log(s) in {', '.join(cfg.log_dirs)}", flush=True)
    if cfg["remote.log.storage.system.enable"]:
        print(f"tiered storage: {cfg['remote.log.storage.manager.class.name']} "
              f"{cfg.rsm_config() or ''}".rstrip(), flush=True)
    print(f"will serve {listeners} once the network server lands; stop with Ctrl-C", flush=True)
    try:
        while not stop.wait(HOUSEKEEPING_TICK_S):
            manager.run_housekeeping()
    finally:
        manager.shutdown()
        print("tierlog broker stopped cleanly", flush=True)
    return 0
