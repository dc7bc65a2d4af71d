"""The broker's client quotas, built once by the composition root (the replication throttles are replication's,
:mod:`tierlog.server.replication.builder`)."""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.cluster import Controller
from tierlog.config import BrokerConfig
from tierlog.metrics import MetricsRegistry
from tierlog.server.quotas.client_quota import ClientQuotaMetrics, ClientQuotas


@dataclass(frozen=True)
class Quotas:
    client: ClientQuotas  # produce, fetch and request quotas per user and client id

    def follow(self, controller: Controller) -> None:
        """The client quotas as the metadata image has them now and after every change; called once the image
        is loaded (in a cluster, read from ZooKeeper after the listeners are bound)."""
        client = self.client
        client.update(controller.image.client_quotas)
        controller.add_listener(lambda _delta, image: client.update(image.client_quotas))


def build_quotas(cfg: BrokerConfig, metrics: MetricsRegistry) -> Quotas:
    return Quotas(ClientQuotas(cfg["quota.window.num"], cfg["quota.window.size.seconds"],
                               metrics=ClientQuotaMetrics(metrics)))


__all__ = ["Quotas", "build_quotas"]
