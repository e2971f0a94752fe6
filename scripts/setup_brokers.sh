#!/usr/bin/env bash
# Idempotent install of the real brokers the conformance suite (tests/realbrokers,
# bench/conformance.py) runs against, and of their Python clients:
# - RabbitMQ 3.10 from Debian's rabbitmq-server (apt-get, as root); it is run by the tests as a
#   plain process with its state in a temporary folder, never as the system service;
# - ActiveMQ Artemis 2.40.0's binary distribution from Maven Central
#   (org.apache.activemq:apache-artemis:2.40.0:tar.gz:bin), fetched with the project's Maven
#   helper (jobs.jvm_jars.copy_artifact) and unpacked into .jvm/brokers/;
# - RabbitMQ 4.0 (native AMQP 1.0) from Debian 13's packages, with its own Erlang, unpacked into
#   .jvm/brokers/rabbitmq-4.0/ without touching the system's packages (scripts/setup_rabbitmq4.sh);
# - python-qpid-proton (AMQP 1.0) and pika (AMQP 0.9.1) into .venv.
# A second run finds everything in place, prints one line and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

ARTEMIS_VERSION=2.40.0
BROKERS_DIR=.jvm/brokers
ARTEMIS_HOME="$BROKERS_DIR/apache-artemis-$ARTEMIS_VERSION"
RABBITMQ_SERVER=/usr/lib/rabbitmq/bin/rabbitmq-server
RABBITMQ4_MARKER="$BROKERS_DIR/rabbitmq-4.0/.installed"
PROTON_PIN="python-qpid-proton==0.40.0"
PIKA_PIN="pika==1.4.4"

if [ ! -x .venv/bin/python ]; then
  echo "setup_brokers: .venv is missing: run scripts/setup.sh first" >&2
  exit 1
fi

clients_ok() {
  .venv/bin/python - "$PROTON_PIN" "$PIKA_PIN" <<'EOF'
import importlib.metadata as md
import sys

for pin in sys.argv[1:]:
    name, version = pin.split("==")
    try:
        if md.version(name) != version:
            sys.exit(1)
    except md.PackageNotFoundError:
        sys.exit(1)
EOF
}

rabbit_ok=0; artemis_ok=0; clients=0; rabbit4_ok=0
[ -x "$RABBITMQ_SERVER" ] && rabbit_ok=1
[ -f "$RABBITMQ4_MARKER" ] && rabbit4_ok=1
[ -x "$ARTEMIS_HOME/bin/artemis" ] && artemis_ok=1
clients_ok && clients=1
if [ "$rabbit_ok$artemis_ok$clients$rabbit4_ok" = 1111 ]; then
  echo "setup_brokers: RabbitMQ ($RABBITMQ_SERVER), RabbitMQ 4.0 ($BROKERS_DIR/rabbitmq-4.0)," \
    "Artemis $ARTEMIS_VERSION ($ARTEMIS_HOME), $PROTON_PIN and $PIKA_PIN already installed:" \
    "nothing to do"
  exit 0
fi

if [ "$rabbit_ok" = 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_brokers: $RABBITMQ_SERVER is missing; as root: apt-get install -y rabbitmq-server" >&2
    exit 1
  fi
  echo "setup_brokers: installing Debian's rabbitmq-server"
  apt-get update -qq >/dev/null
  # The tests run the broker as a plain process: the package's service must not start (on 5672
  # and with epmd, it would hold the node's name and ports). invoke-rc.d asks policy-rc.d; when
  # the machine has none (an ordinary Debian host, unlike a container's), one that refuses every
  # start stands in for the install only.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
    trap '[ "$own_policy" = 1 ] && rm -f "$policy"' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
  if [ "$own_policy" = 1 ]; then rm -f "$policy"; own_policy=0; fi
  [ -x "$RABBITMQ_SERVER" ] || { echo "setup_brokers: no $RABBITMQ_SERVER after apt-get" >&2; exit 1; }
fi

if [ "$artemis_ok" = 0 ]; then
  if ! command -v mvn >/dev/null 2>&1; then
    echo "setup_brokers: Maven (mvn) is missing: run scripts/setup.sh (it installs it)" >&2
    exit 1
  fi
  echo "setup_brokers: fetching Artemis $ARTEMIS_VERSION from Maven Central into $BROKERS_DIR"
  mkdir -p "$BROKERS_DIR"
  tarball=$(.venv/bin/python -c '
import sys
from pathlib import Path
from jobs.jvm_jars import JarsError, copy_artifact
try:
    print(copy_artifact(sys.argv[1], Path(sys.argv[2])))
except JarsError as error:
    sys.exit(f"setup_brokers: {error}")
' "org.apache.activemq:apache-artemis:$ARTEMIS_VERSION:tar.gz:bin" "$BROKERS_DIR")
  # Unpack beside, then move into place: an interrupted run leaves no half distribution.
  staging=$(mktemp -d "$BROKERS_DIR/.unpack-XXXXXX")
  tar xzf "$tarball" -C "$staging"
  rm -rf "$ARTEMIS_HOME"
  mv "$staging/apache-artemis-$ARTEMIS_VERSION" "$ARTEMIS_HOME"
  rm -rf "$staging" "$tarball"
  [ -x "$ARTEMIS_HOME/bin/artemis" ] || { echo "setup_brokers: no $ARTEMIS_HOME/bin/artemis" >&2; exit 1; }
fi

if [ "$rabbit4_ok" = 0 ]; then
  bash scripts/setup_rabbitmq4.sh
fi

if [ "$clients" = 0 ]; then
  echo "setup_brokers: installing $PROTON_PIN and $PIKA_PIN into .venv"
  .venv/bin/pip install -q "$PROTON_PIN" "$PIKA_PIN"
fi
echo "setup_brokers: RabbitMQ $(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null)," \
  "$(cat "$RABBITMQ4_MARKER"), Artemis $ARTEMIS_VERSION in $ARTEMIS_HOME, $PROTON_PIN, $PIKA_PIN: ready"
