#!/usr/bin/env bash
# Idempotent set-up: installs what is missing (Debian packages, the Python venv) and nothing else.
# A second run finds everything in place and changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# chromium: the report tests open report.html and the store index in headless Chromium.
for pkg in rabbitmq-server iptables iproute2 procps openssh-server python3-venv chromium; do
  have "$pkg" || need_pkgs+=("$pkg")
done
command -v java >/dev/null 2>&1 || need_pkgs+=(openjdk-17-jre-headless)
# The Docker backend: a daemon (any installed one will do), debootstrap to build its image from
# Debian's packages (scripts/build-docker-image.sh), tini to reap what test SSH hosts leave.
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
for pkg in debootstrap tini; do
  have "$pkg" || need_pkgs+=("$pkg")
done
# The lazyfs layer (clusters/lazyfs/): FUSE 3 (fuse3, its library), and what pip needs to build
# pyfuse3 against it (libfuse3-dev, pkg-config, gcc).
for pkg in fuse3 libfuse3-dev pkg-config gcc; do
  have "$pkg" || need_pkgs+=("$pkg")
done

if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "setup: installing ${need_pkgs[*]}"
  # Keep Debian from starting a system broker or sshd of its own: ours run in namespaces.
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
fi

stamp=.venv/.requirements.sha
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: building .venv from requirements.txt"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
  echo "$want" > "$stamp"
fi
echo "setup: ok (rabbitmq-server $(dpkg-query -W -f='${Version}' rabbitmq-server), $(.venv/bin/python --version))"
