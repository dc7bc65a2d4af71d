"""A background writer for tests that fault a cluster under load: an idempotent confluent-kafka producer
(acks=all) sending numbered values on a thread until stopped, recording each acknowledgement as
(partition, offset, value) and each delivery error."""

from __future__ import annotations

import threading


class BackgroundWriter:
    def __init__(self, bootstrap: str, topic: str, prefix: bytes, partitions: int = 1, linger_ms: int = 2,
                 settings: dict | None = None):
        """Values are ``prefix`` and a six-digit counter; the n-th goes to partition n % ``partitions``.
        ``settings``: more librdkafka settings, over the writer's own."""
        from confluent_kafka import Producer
        self.topic, self.prefix, self.partitions = topic, prefix, partitions
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": linger_ms, "message.timeout.ms": 120000, **(settings or {})})
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, name=f"writer-{topic}")

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors.append(f"{err.name()} fatal={err.fatal()}")
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def _write(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, self.prefix + b"%06d" % i, partition=i % self.partitions,
                                      on_delivery=self._on_delivery)
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def start(self) -> BackgroundWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sending, then wait for the answers of what was sent."""
        self._stop.set()
        self._thread.join()
        self.producer.flush(60)
