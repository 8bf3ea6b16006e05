#!/bin/sh
# Installs what the tests need from Debian's archive, once. Safe to rerun.
set -e
need=""
for pkg in cmake gcc make pkg-config python3 python3-pytest clang clang-format libclang-rt-14-dev \
    python3-dev python3-pip python3-setuptools python3-wheel python3-torch libmicrohttpd-dev chromium prometheus nodejs; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
done
# npm comes with NodeSource's nodejs, or as Debian's own package.
command -v npm >/dev/null 2>&1 || need="$need npm"
[ -z "$need" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages:$need (run as root, or: sudo apt-get install$need)" >&2
  exit 1
fi
echo "installing:$need"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
