#!/usr/bin/env bash
# Installs the system packages the tests need: Mesa lavapipe (a Vulkan driver
# that runs on the CPU, from bookworm-backports because Debian 12's stock 22.x
# lavapipe lacks what Dawn needs) and the Vulkan loader. The backports mirror is
# derived from the Debian mirror already configured, never written here.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [ "$codename" = bookworm ]; then
  list=/etc/apt/sources.list.d/rayo-backports.sources
  if [ ! -f "$list" ]; then
    # The first configured URI that serves the plain "bookworm" suite.
    mirror=$(awk '
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm" && uri != "") { print uri; exit } }
      /^$/ { uri = "" }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
      mirror=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list)
    fi
    if [ -z "$mirror" ]; then
      echo "system-deps: no Debian bookworm mirror configured in /etc/apt; cannot add bookworm-backports" >&2
      exit 1
    fi
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: %s\n' "$mirror" "$keyring" | $SUDO tee "$list" >/dev/null
  fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports mesa-vulkan-drivers libvulkan1 chromium >/dev/null
else
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1 chromium >/dev/null
fi
dpkg-query -W -f='system-deps: ${Package} ${Version}\n' mesa-vulkan-drivers libvulkan1
