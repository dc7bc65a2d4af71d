"""Tiered storage (KIP-405) as the broker builds it when ``remote.log.storage.system.enable``: the storage plugin,
the metadata manager (configured now, started once the broker is ready, KIP-1197) and the remote log manager
driving both, with its reader. The metadata manager's clients talk to this broker's own listener."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tierlog.cluster import Controller
from tierlog.config import BrokerConfig
from tierlog.config.definitions import RLMM_PREFIX
from tierlog.metrics import MetricsRegistry
from tierlog.security import SSL_SETTINGS
from tierlog.server.network.listeners import BoundListener
from tierlog.server.network.sasl_authenticator import jaas_config
from tierlog.storage import LogManager
from tierlog.tiered.remote_log_manager import RemoteLogManager, build_remote_log_manager
from tierlog.tiered.rlmm import create_remote_log_metadata_manager
from tierlog.tiered.rlmm.consumer_task import METADATA_TOPIC
from tierlog.tiered.rsm import create_remote_storage_manager

log = logging.getLogger("tierlog.server.broker")  # a start-up line of the broker's, as before


def build_tiered_storage(cfg: BrokerConfig, node_id: int, cluster_id: str | None, controller: Controller,
                         listeners: list[BoundListener], log_manager: LogManager, metrics: MetricsRegistry,
                         fail: Callable[[str], None],
                         leader_session: Callable[[], object] | None) -> RemoteLogManager:
    """``fail(reason)`` stops the broker when the metadata manager cannot work; ``leader_session`` (a cluster's
    ZooKeeper session) lets a leader whose session ended publish no upload and delete nothing."""
    rsm = create_remote_storage_manager(cfg["remote.log.storage.manager.class.name"],
                                        {**cfg.rsm_config(), "broker.id": str(node_id), "cluster.id": cluster_id or ""},
                                        cfg["remote.log.storage.manager.class.path"])
    listener = cfg.remote_log_metadata_listener
    bound = next((b for b in listeners if b.name == listener.name), listeners[0])
    host = bound.host if bound.host not in ("0.0.0.0", "", "::") else "127.0.0.1"
    rlmm_configs = {
        "remote.log.metadata.common.client.bootstrap.servers": f"{host}:{bound.port}",
        "remote.log.metadata.common.client.security.protocol": bound.security_protocol,
        **_client_ssl_settings(cfg, bound),
        **_client_sasl_settings(cfg, bound),
        **cfg.rlmm_config(),
        "broker.id": str(node_id), "log.dir": cfg.log_dirs[0], "cluster.id": cluster_id or "",
    }
    if cfg["remote.log.metadata.manager.class.name"] == "topic":
        # Kafka's default factor of 3 can never be met on one node: the controller's rule caps it there.
        rf = "remote.log.metadata.topic.replication.factor"
        rlmm_configs[rf] = str(controller.internal_topic_replication_factor(
            METADATA_TOPIC, cfg.rlmm_prefix + rf, cfg[RLMM_PREFIX + rf]))
    rlmm = create_remote_log_metadata_manager(cfg["remote.log.metadata.manager.class.name"], rlmm_configs,
                                              cfg["remote.log.metadata.manager.class.path"])
    rlmm.set_fatal_error_handler(fail)
    log.info("Tiered storage on: %s remote storage, %s metadata manager", type(rsm).__name__, type(rlmm).__name__)
    cleaner = log_manager.cleaner
    return build_remote_log_manager(cfg, node_id, rsm, rlmm, cfg.log_dirs[0], metrics,
                                    lambda: controller.effective_config,
                                    lambda topic, partition: cleaner.cleaned_up_to((topic, partition)),
                                    leader_session=leader_session)


#: The ssl.* settings a client reads (a listener's values handed to the metadata manager's clients).
_CLIENT_SSL_SETTINGS = tuple(n for n in SSL_SETTINGS if n != "ssl.client.auth")


def _client_ssl_settings(cfg: BrokerConfig, bound: BoundListener) -> dict[str, str]:
    """The metadata manager's clients talk to an SSL or SASL_SSL listener with that listener's ssl settings
    (this broker's certificate, its truststore), as text under the common client prefix."""
    if bound.security_protocol not in ("SSL", "SASL_SSL"):
        return {}
    out = {}
    for name, value in cfg.listener_ssl_settings(bound.name).items():
        if name in _CLIENT_SSL_SETTINGS and value is not None:
            value = getattr(value, "value", value)
            text = ",".join(value) if isinstance(value, list) else str(value)
            out[f"remote.log.metadata.common.client.{name}"] = text
    return out


def _client_sasl_settings(cfg: BrokerConfig, bound: BoundListener) -> dict[str, str]:
    """On a SASL_PLAINTEXT or SASL_SSL listener the metadata manager's clients authenticate as the broker does
    to the others: ``sasl.mechanism.inter.broker.protocol`` with the listener's JAAS configuration for it (the
    broker's own user). ``remote.log.metadata.common.client.sasl.*`` set under the manager's prefix win, as
    Kafka's operators set them there."""
    if not bound.security_protocol.startswith("SASL_"):
        return {}
    mechanism = str(cfg["sasl.mechanism.inter.broker.protocol"]).upper()
    out = {"remote.log.metadata.common.client.sasl.mechanism": mechanism}
    text = jaas_config(cfg, bound.name, mechanism)
    if text:
        out["remote.log.metadata.common.client.sasl.jaas.config"] = text
    return out


__all__ = ["build_tiered_storage"]
