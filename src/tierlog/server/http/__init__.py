"""The broker's HTTP side: its endpoint on ``metrics.host``:``metrics.port`` and what it serves.

- :mod:`.http_endpoint`: the HTTP server, its routes (metrics, probes) and their helpers;
- :mod:`.broker_metrics`: the broker's own metrics with Kafka's names (requests per API, topic and ISR
  metrics, the broker state), which the endpoint renders for Prometheus;
- :mod:`.tier_status`: the tiered storage status and reconcile routes (``/v1/tier/...``);
- :mod:`.cleaner_status`: the log cleaner status route (``/v1/cleaner/status``).
"""
