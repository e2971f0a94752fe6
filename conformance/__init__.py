"""Conformance: the engine held against real brokers (DESIGN.md §6, issue 18).

:mod:`conformance.brokers` starts ActiveMQ Artemis and RabbitMQ as plain processes on loopback
with their state in a temporary folder; :mod:`conformance.real` runs workloads on them with real
clients (python-qpid-proton, pika, Artemis's own ``artemis producer``); :mod:`conformance.engine`
runs the same workloads on the engine; :mod:`conformance.cases` compares named figures and
returns rows (workload, figure, real broker, engine, tolerance, verdict).
"""
