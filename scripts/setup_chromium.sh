#!/usr/bin/env bash
# Idempotent install of headless Chromium (Debian's `chromium` package), used by
# tests/test_dashboard.py to open the dashboard page as a person would. Needs root for apt-get.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup_chromium: /usr/bin/chromium is missing; run as root: apt-get install -y chromium" >&2
  exit 1
fi
echo "setup_chromium: installing Debian's chromium"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
/usr/bin/chromium --version
