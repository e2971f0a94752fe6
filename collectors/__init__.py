"""Collectors: the event log of real brokers (ActiveMQ Artemis, RabbitMQ) read from their logs and
management APIs, and the AMQP 1.0 links a client records of its own, written as the engine writes
its own (DESIGN §6)."""
