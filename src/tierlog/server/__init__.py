"""The broker: network server, Kafka API handlers, replica manager and start-up/shutdown."""
